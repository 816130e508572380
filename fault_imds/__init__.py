"""fault_imds: an instance metadata service derived from live EC2 state, with faults."""
