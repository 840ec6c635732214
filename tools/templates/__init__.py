"""Modules that `tools.generate` copies into generated/ (the package `wuu.generated`) under the same names.

They import only each other (relatively) and third-party libraries, never `tools`, so that the copies
work inside `wuu.generated`; the tools import the originals as `tools.templates.<name>`.
"""
