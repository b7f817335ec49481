"""The agent as an NRI plugin: containers get their cpuset from the runtime when they are created.

NRI (containerd >= 1.7, CRI-O >= 1.26) lets a plugin adjust a container before it is created and update
running containers. No Python library speaks it, so the transport is Ballast's own:

- ``framing``: the multiplexed trunk frames and the ttrpc messages, pure byte handling;
- ``ttrpc``: one socket connection serving the Plugin service and calling the Runtime service;
- ``messages``: the protobuf messages (``nri.proto``, generated like the CRI stubs);
- ``plugin``: registration, Configure, Synchronize, CreateContainer and the updates, on a ``Pinner``
  (the CPU manager) that says which cpuset each container gets.

Importing this package imports nothing else.
"""
