"""clusterbench: is this hardware fit to train, and how fast is it?"""

import os

# c10d logs every lost connection with a C++ stack trace; clusterbench reports each failure in
# one line of its own. Set before torch loads, and only where the user has not chosen a level.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

__version__ = "0.1.0"
