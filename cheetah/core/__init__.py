"""The bottom layer: what every other package may import and which imports nothing of
cheetah. ``wire`` (tool specs, calls and results as the model and the services exchange
them), ``workspace`` (where tools act: the ``Workspace`` protocol, a local directory, process
running) and ``safefs`` (host-side file access by descriptor, for session trees).
"""
