"""What a user reads: the report schema, terminal/markdown text, the HTML page, the PNG picture, before/after
comparison and atomic writes. Torch-free: the offline CLI renders with it too."""
