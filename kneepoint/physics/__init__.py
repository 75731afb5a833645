"""Pure physics of a serving engine: engine defaults, the KV memory model (full, sliding-window
and hybrid attention), weight formats and quantisation, and the roofline.

Shared by the simulator (which runs it), the preflight (will a config start?), diagnosis (a
roofline estimate when GPU counters are missing) and the calibration. Imports only records.
"""
