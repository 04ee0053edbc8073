"""What the project adds to the DiffusionGemma network: the copy head and the vision input path."""
