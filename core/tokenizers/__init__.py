"""Pure-Python tokenizer.json reader."""
