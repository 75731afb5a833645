"""How one configuration is measured: the sweep protocol (which rates, the retakes a point that
cannot tell gets, the knee and the capacity it reads; no side effect of its own) and the
harness that runs it on a study's backend (``bench``: fresh servers, transient retries, device
time, every point kept). The servers, load and telemetry themselves are ``kneepoint.probes``."""
