"""The model's one tool: the IPython kernel's launcher and client, the host side of the bridge, and ``api/`` (code
that runs inside the kernel).
"""
