"""Pure physics of a serving engine: engine defaults, the KV memory model and the roofline.

Shared by the simulator (which runs it), the preflight (will a config start?) and diagnosis
(a roofline estimate when GPU counters are missing). Imports only records.
"""
