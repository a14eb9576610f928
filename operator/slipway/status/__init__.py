"""Pure status logic: observed state in, phase and conditions out. No I/O."""
