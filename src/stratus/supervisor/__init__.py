"""Supervisors run the pipelines assigned to them, one worker process (a PySpark driver) each."""
