"""Several processes and what crosses devices: the collectives, FSDP2 sharding, precision, memory, weight sync."""
