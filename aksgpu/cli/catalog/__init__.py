"""The hardware catalog aksgpu checks specs against (`vm-sizes`); the table is
aksgpu/components/data/vm_sizes.yaml."""
