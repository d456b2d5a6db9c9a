"""`aksgpu promote ENV`: health-gated promotion of the GPU pools' stack (aksgpu.promotion)."""
