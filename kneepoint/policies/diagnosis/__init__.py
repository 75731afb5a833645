"""What binds: a sweep read at its knee (``observe``), the evidence of each resource (GPU
counters, or the step's roofline estimate when they are missing), and the diagnosis that names
the binding resource (``diagnose``). Pure."""
