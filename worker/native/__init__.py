"""The native reference worker: workspace tools, background processes and exports on the local machine."""
