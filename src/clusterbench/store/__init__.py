"""The results store: every run and every node's figures in it, kept where history can be asked of them."""
