/* A C extension as PyTorch's are: it releases the GIL (Py_BEGIN_ALLOW_THREADS) around its CUDA
   calls. allocate(n) and free(ptr) from the calling thread; native_thread_allocate(n) from a
   thread of its own that runs no Python code. The tests build it against each Python they run.
   (Py_LIMITED_API is not used: it must build against every version's full headers.) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

typedef int cudaError_t;
cudaError_t cudaMalloc(void** ptr, size_t size);
cudaError_t cudaFree(void* ptr);

static PyObject* allocate(PyObject* self, PyObject* args) {
  Py_ssize_t size;
  void* p = NULL;
  cudaError_t e;
  (void)self;
  if (!PyArg_ParseTuple(args, "n", &size)) return NULL;
  Py_BEGIN_ALLOW_THREADS e = cudaMalloc(&p, (size_t)size);  // memtrace-test: ext-malloc
  Py_END_ALLOW_THREADS if (e != 0) return PyErr_Format(PyExc_MemoryError, "cudaMalloc failed with %d", e);
  return PyLong_FromVoidPtr(p);
}

static PyObject* release(PyObject* self, PyObject* args) {
  PyObject* address;
  cudaError_t e;
  (void)self;
  if (!PyArg_ParseTuple(args, "O", &address)) return NULL;
  void* p = PyLong_AsVoidPtr(address);
  Py_BEGIN_ALLOW_THREADS e = cudaFree(p);
  Py_END_ALLOW_THREADS if (e != 0) return PyErr_Format(PyExc_RuntimeError, "cudaFree failed with %d", e);
  Py_RETURN_NONE;
}

static void* native_thread(void* arg) {
  size_t size = *(size_t*)arg;
  void* p = NULL;
  if (cudaMalloc(&p, size) == 0) cudaFree(p);
  return NULL;
}

static PyObject* native_thread_allocate(PyObject* self, PyObject* args) {
  Py_ssize_t size;
  pthread_t thread;
  size_t bytes;
  (void)self;
  if (!PyArg_ParseTuple(args, "n", &size)) return NULL;
  bytes = (size_t)size;
  Py_BEGIN_ALLOW_THREADS if (pthread_create(&thread, NULL, native_thread, &bytes) == 0) pthread_join(thread, NULL);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"allocate", allocate, METH_VARARGS, "cudaMalloc(n) with the GIL released; the pointer"},
    {"free", release, METH_VARARGS, "cudaFree(ptr) with the GIL released"},
    {"native_thread_allocate", native_thread_allocate, METH_VARARGS, "cudaMalloc(n) and cudaFree from a native thread"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "memtrace_ext", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_memtrace_ext(void) { return PyModule_Create(&module); }
