"""The kubelet's CPU manager test topologies (``pkg/kubelet/cm/cpumanager/policy_test.go``), as data.

Built with ``CPUTopology.from_cpus`` from ``(cpu, core, socket, numa)`` rows, with the kubelet's own
core ids (which are not always the lowest thread id), so the tie-breaks match its test tables.
"""

from __future__ import annotations

from ballast.agent.topology.model import CPUTopology

# 1 socket, 4 cores, 2 threads: CPU c and c+4 share core c.
SINGLE_SOCKET_HT = CPUTopology.from_cpus((cpu, cpu % 4, 0, 0) for cpu in range(8))

# 2 sockets x 3 cores x 2 threads: even CPUs on socket/NUMA 0, odd on 1; core c is CPUs c and c+6.
DUAL_SOCKET_HT = CPUTopology.from_cpus((cpu, cpu % 6, cpu % 2, cpu % 2) for cpu in range(12))

# 2 sockets x 4 cores, no SMT: CPUs 0-3 on socket/NUMA 0, 4-7 on 1.
DUAL_SOCKET_NO_HT = CPUTopology.from_cpus((cpu, cpu, cpu // 4, cpu // 4) for cpu in range(8))

# Fake 3-socket machine: cores 0-2 (CPUs 0-5) on socket 1, cores 3-5 on socket 0, cores 6-8 on socket 2.
_TRIPLE_SOCKET_OF_CORE = (1, 1, 1, 0, 0, 0, 2, 2, 2)
TRIPLE_SOCKET_HT = CPUTopology.from_cpus(
    (cpu, cpu // 2, _TRIPLE_SOCKET_OF_CORE[cpu // 2], _TRIPLE_SOCKET_OF_CORE[cpu // 2]) for cpu in range(18)
)

# Dual Xeon Gold 6230 with sub-NUMA clustering: 2 sockets x 20 cores x 2 threads, 4 NUMA nodes
# (node0 0-9,40-49; node1 10-19,50-59; node2 20-29,60-69; node3 30-39,70-79).
DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT = CPUTopology.from_cpus(
    (cpu, cpu % 40, (cpu % 40) // 20, (cpu % 40) // 10) for cpu in range(80)
)

# The same machine with NUMA nodes and sockets swapped: 4 sockets, 2 NUMA nodes.
FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT = CPUTopology.from_cpus(
    (cpu, cpu % 40, (cpu % 40) // 10, (cpu % 40) // 20) for cpu in range(80)
)

# Dual AMD EPYC 7742 with NPS=4: 2 sockets x 64 cores x 2 threads, 8 NUMA nodes of 16 cores each.
DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT_LARGE = CPUTopology.from_cpus(
    (cpu, cpu % 128, (cpu % 128) // 64, (cpu % 128) // 16) for cpu in range(256)
)

# Knights Landing in SNC-4 mode: 4 sockets x 18 cores x 4 threads, NUMA node = socket.
# Per socket: core id -> its four CPUs, transcribed from the kubelet fixture.
_QUAD_SOCKET_CORES: dict[int, dict[int, tuple[int, int, int, int]]] = {
    0: {
        0: (0, 169, 109, 229),
        1: (50, 170, 110, 230),
        64: (1, 25, 13, 38),
        65: (2, 26, 14, 39),
        72: (9, 33, 21, 46),
        73: (10, 34, 22, 47),
        8: (57, 177, 117, 237),
        9: (58, 178, 118, 238),
        24: (71, 191, 131, 251),
        25: (72, 192, 132, 252),
        32: (79, 199, 139, 259),
        33: (80, 200, 140, 260),
        40: (87, 207, 147, 267),
        41: (88, 208, 148, 268),
        48: (95, 215, 155, 275),
        49: (96, 216, 156, 276),
        56: (103, 223, 163, 283),
        57: (104, 224, 164, 284),
    },
    1: {
        66: (3, 27, 15, 40),
        67: (4, 28, 16, 41),
        74: (11, 35, 23, 48),
        75: (12, 36, 24, 49),
        2: (51, 171, 111, 231),
        3: (52, 172, 112, 232),
        10: (59, 179, 119, 239),
        11: (60, 180, 120, 240),
        18: (65, 185, 125, 245),
        19: (66, 186, 126, 246),
        26: (73, 193, 133, 253),
        27: (74, 194, 134, 254),
        34: (81, 201, 141, 261),
        35: (82, 202, 142, 262),
        42: (89, 209, 149, 269),
        43: (90, 210, 150, 270),
        50: (97, 217, 157, 277),
        51: (98, 218, 158, 278),
    },
    2: {
        68: (5, 29, 17, 42),
        69: (6, 30, 18, 43),
        4: (53, 173, 113, 233),
        5: (54, 174, 114, 234),
        12: (61, 181, 121, 241),
        13: (62, 182, 122, 242),
        20: (67, 187, 127, 247),
        21: (68, 188, 128, 248),
        28: (75, 195, 135, 255),
        29: (76, 196, 136, 256),
        36: (83, 203, 143, 263),
        37: (84, 204, 144, 264),
        44: (91, 211, 151, 271),
        45: (92, 212, 152, 272),
        52: (99, 219, 159, 279),
        53: (100, 220, 160, 280),
        60: (105, 225, 165, 285),
        61: (106, 226, 166, 286),
    },
    3: {
        70: (7, 31, 19, 44),
        71: (8, 32, 20, 45),
        63: (37, 168, 108, 228),
        62: (107, 227, 167, 287),
        6: (55, 175, 115, 235),
        7: (56, 176, 116, 236),
        14: (63, 183, 123, 243),
        15: (64, 184, 124, 244),
        22: (69, 189, 129, 249),
        23: (70, 190, 130, 250),
        30: (77, 197, 137, 257),
        31: (78, 198, 138, 258),
        38: (85, 205, 145, 265),
        39: (86, 206, 146, 266),
        46: (93, 213, 153, 273),
        47: (94, 214, 154, 274),
        54: (101, 221, 161, 281),
        55: (102, 222, 162, 282),
    },
}
QUAD_SOCKET_FOUR_WAY_HT = CPUTopology.from_cpus(
    (cpu, core, socket, socket)
    for socket, cores in _QUAD_SOCKET_CORES.items()
    for core, cpus in cores.items()
    for cpu in cpus
)

# The socket cpulists from the fixture's comment (hwloc's KNL SNC-4 picture), to cross-check the table.
QUAD_SOCKET_CPULISTS = {
    0: "0-2,9-10,13-14,21-22,25-26,33-34,38-39,46-47,50,57-58,71-72,79-80,87-88,95-96,103-104,109-110,"
    "117-118,131-132,139-140,147-148,155-156,163-164,169-170,177-178,191-192,199-200,207-208,215-216,"
    "223-224,229-230,237-238,251-252,259-260,267-268,275-276,283-284",
    1: "3-4,11-12,15-16,23-24,27-28,35-36,40-41,48-49,51-52,59-60,65-66,73-74,81-82,89-90,97-98,111-112,"
    "119-120,125-126,133-134,141-142,149-150,157-158,171-172,179-180,185-186,193-194,201-202,209-210,"
    "217-218,231-232,239-240,245-246,253-254,261-262,269-270,277-278",
    2: "5-6,17-18,29-30,42-43,53-54,61-62,67-68,75-76,83-84,91-92,99-100,105-106,113-114,121-122,127-128,"
    "135-136,143-144,151-152,159-160,165-166,173-174,181-182,187-188,195-196,203-204,211-212,219-220,"
    "225-226,233-234,241-242,247-248,255-256,263-264,271-272,279-280,285-286",
    3: "7-8,19-20,31-32,37,44-45,55-56,63-64,69-70,77-78,85-86,93-94,101-102,107-108,115-116,123-124,129-130,"
    "137-138,145-146,153-154,161-162,167-168,175-176,183-184,189-190,197-198,205-206,213-214,221-222,"
    "227-228,235-236,243-244,249-250,257-258,265-266,273-274,281-282,287",
}
