"""Text in and out: tokenizer and chat template, tool prompts, tool-call parsing, stop strings."""
