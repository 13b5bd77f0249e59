class Unsupported(RuntimeError):
    pass
