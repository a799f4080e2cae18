"""One answer, read top to bottom: the handler (arrival, gate, model with tools, store), the
context a reply reads (card, memories, summary, window, recall, lorebook), the prompt made of
it, and the images a message brings."""
