"""Exclusive CPUs as the kubelet's CPU manager gives them: the static policy, the assignment
algorithm, the state and its checkpoint, the manager that makes cpusets follow assignments, and how
cpusets reach containers (the runtime)."""
