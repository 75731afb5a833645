"""Which knobs can help what binds: each knob's modelled effect in the situation the diagnosis
names (batch, KV cache, quantization, tensor parallelism, prefix reuse), and the pruning that
keeps the candidates worth a trial, ordered by predicted gain (``prune``). Pure."""
