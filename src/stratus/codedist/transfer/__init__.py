"""Moving package bytes between nimbuses (and to supervisors), checked against their digest."""
