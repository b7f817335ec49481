"""What crosses the cluster boundary, one module each: load annotations, the NodeLoad, the topology
result and its seal, the NodeResourceTopology's coordinates, quantities, durations, times, numbers from
untrusted input, and reading a pod. Pure: imports nothing of Ballast outside this package."""
