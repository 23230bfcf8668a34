"""clusterbench: is this hardware fit to train, and how fast is it?"""

import os

# c10d logs every lost connection with a C++ stack trace, and a rank that gives up waiting for
# rank 0 some twenty lines at ERROR; clusterbench reports each failure in one line of its own.
# Set before torch loads, only where the user has not chosen a level, and not when debugging.
if not os.environ.get("CLUSTERBENCH_DEBUG"):
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")

__version__ = "0.1.0"
