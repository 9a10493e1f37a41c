"""The streaming example pipeline: windowed counts of JSON events, exactly once into parquet."""
