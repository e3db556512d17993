/* RDMA NIC discovery through libibverbs, and the choice of the NIC a
 * TransferEngine pins UCX to.
 *
 * On a GPU node the NIC that shares a PCIe switch with the GPU gives
 * GPUDirect RDMA its full bandwidth; crossing the CPU root complex or the
 * socket interconnect halves it. So the choice prefers, in order: an active
 * port; the NIC whose sysfs PCI path shares the longest prefix with the
 * GPU's; the NIC on the requested NUMA node; then the first by name. Where
 * no RDMA device exists (laptops, CI, this sandbox) discovery succeeds with
 * zero NICs and says why, and UCX picks the transport itself. */
#ifndef TANDEM_TRANSFER_NIC_H
#define TANDEM_TRANSFER_NIC_H
#include <stdint.h>

#define TE_NIC_MAX_PORTS 8

typedef struct te_nic_port {
    int port;          /* 1-based port number, as UCX_NET_DEVICES spells it */
    int active;        /* state is IBV_PORT_ACTIVE */
    int link_layer;    /* 1 InfiniBand, 2 Ethernet (RoCE), 0 unknown */
    int mtu_bytes;     /* active MTU */
} te_nic_port;

typedef struct te_nic {
    char name[64];        /* e.g. "mlx5_0" */
    uint64_t node_guid;   /* network byte order, as libibverbs reports it */
    int numa_node;        /* -1 when sysfs does not say */
    char pci_path[256];   /* resolved sysfs device path ("" when unknown) */
    int n_ports;
    te_nic_port ports[TE_NIC_MAX_PORTS];
} te_nic;

typedef struct te_nic_list {
    te_nic *nics;
    int n;
    char note[256]; /* one line: what was found, or why nothing was */
} te_nic_list;

/* Enumerates RDMA devices and their ports. Returns 0 (with n == 0 and a note
 * when there is no device or no kernel support), -1 only when memory runs
 * out. */
int te_nic_discover(te_nic_list *out);
void te_nic_list_free(te_nic_list *list);

/* Chooses a NIC port for a transfer (see the order above). near_pci_path is
 * the resolved sysfs path of the GPU (NULL: none), numa_node -1 means any.
 * Returns the NIC index and sets *port, or -1 when no port is active. Pure:
 * reads only the list. */
int te_nic_select(const te_nic_list *list, const char *near_pci_path, int numa_node, int *port);

#endif
