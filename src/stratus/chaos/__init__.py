"""The chaos suite's judge: the oracle that reads the processes' history (``oracle``)."""
