"""Word statistics of chat messages, with its own tests written with the test kit."""
