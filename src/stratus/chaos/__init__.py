"""The chaos suite's parts that are pure logic: the oracle that reads the processes' history
(``oracle``), and the seeded plans of faults (``faults``)."""
