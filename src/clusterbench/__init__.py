"""clusterbench: is this hardware fit to train, and how fast is it?"""

__version__ = "0.1.0"
