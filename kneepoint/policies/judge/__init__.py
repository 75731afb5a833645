"""Whether a challenger beats the incumbent beyond the measured noise (``promotion``: Welch or
bootstrap intervals over repeated sweeps) and whether a screen makes a finalist. Pure."""
