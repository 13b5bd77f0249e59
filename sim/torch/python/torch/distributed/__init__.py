"""torch.distributed, as far as FSDP2's memory goes: DTensor (distributed/tensor) and
fully_shard (distributed/fsdp), on one rank."""
