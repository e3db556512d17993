#include "transfer/transfer_nic.h"
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_int_file(const char *path, int fallback)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fallback;
    int v;
    if (fscanf(f, "%d", &v) != 1)
        v = fallback;
    fclose(f);
    return v;
}

static int mtu_bytes(enum ibv_mtu mtu)
{
    switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
    }
}

/* Ports of one device; a device that cannot be opened is still listed, with
 * no ports, so the note can say it exists. */
static void query_ports(struct ibv_device *dev, te_nic *nic)
{
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx)
        return;
    struct ibv_device_attr attr;
    if (ibv_query_device(ctx, &attr) == 0) {
        for (int p = 1; p <= attr.phys_port_cnt && nic->n_ports < TE_NIC_MAX_PORTS; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0)
                continue;
            te_nic_port *port = &nic->ports[nic->n_ports++];
            port->port = p;
            port->active = pa.state == IBV_PORT_ACTIVE;
            port->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? 1
                               : pa.link_layer == IBV_LINK_LAYER_ETHERNET ? 2 : 0;
            port->mtu_bytes = mtu_bytes(pa.active_mtu);
        }
    }
    ibv_close_device(ctx);
}

int te_nic_discover(te_nic_list *out)
{
    memset(out, 0, sizeof *out);
    int n = 0;
    errno = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (!devs) {
        snprintf(out->note, sizeof out->note,
                 "no RDMA device: libibverbs cannot list devices (%s)",
                 errno ? strerror(errno) : "no provider");
        return 0;
    }
    if (n <= 0) {
        ibv_free_device_list(devs);
        snprintf(out->note, sizeof out->note, "no RDMA device: libibverbs found 0 devices");
        return 0;
    }
    out->nics = calloc((size_t)n, sizeof *out->nics);
    if (!out->nics) {
        ibv_free_device_list(devs);
        snprintf(out->note, sizeof out->note, "out of memory listing %d RDMA devices", n);
        return -1;
    }
    int active = 0;
    for (int i = 0; i < n; i++) {
        te_nic *nic = &out->nics[out->n++];
        snprintf(nic->name, sizeof nic->name, "%s", ibv_get_device_name(devs[i]));
        nic->node_guid = ibv_get_device_guid(devs[i]);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/device/numa_node", devs[i]->ibdev_path);
        nic->numa_node = read_int_file(path, -1);
        snprintf(path, sizeof path, "%s/device", devs[i]->ibdev_path);
        char resolved[PATH_MAX];
        if (realpath(path, resolved) && strlen(resolved) < sizeof nic->pci_path)
            memcpy(nic->pci_path, resolved, strlen(resolved) + 1);
        query_ports(devs[i], nic);
        for (int p = 0; p < nic->n_ports; p++)
            active += nic->ports[p].active;
    }
    ibv_free_device_list(devs);
    snprintf(out->note, sizeof out->note, "%d RDMA device(s), %d active port(s)", out->n, active);
    return 0;
}

void te_nic_list_free(te_nic_list *list)
{
    if (!list)
        return;
    free(list->nics);
    list->nics = NULL;
    list->n = 0;
}

/* Number of leading '/'-separated components two sysfs paths share: NICs
 * and GPUs under the same PCIe switch share the switch's components. */
static int common_components(const char *a, const char *b)
{
    int shared = 0;
    size_t i = 0;
    while (a[i] && a[i] == b[i]) {
        i++;
        if ((a[i] == '/' || a[i] == '\0') && (b[i] == '/' || b[i] == '\0'))
            shared++;
    }
    return shared;
}

int te_nic_select(const te_nic_list *list, const char *near_pci_path, int numa_node, int *port)
{
    int best = -1, best_port = 0, best_affinity = -1, best_numa = -1;
    if (!list)
        return -1;
    for (int i = 0; i < list->n; i++) {
        const te_nic *nic = &list->nics[i];
        int first_active = 0;
        for (int p = 0; p < nic->n_ports && !first_active; p++)
            if (nic->ports[p].active)
                first_active = nic->ports[p].port;
        if (!first_active)
            continue;
        int affinity = near_pci_path && nic->pci_path[0]
                           ? common_components(near_pci_path, nic->pci_path) : 0;
        int numa = numa_node >= 0 && nic->numa_node == numa_node;
        int better = best < 0 || affinity > best_affinity ||
                     (affinity == best_affinity && numa > best_numa) ||
                     (affinity == best_affinity && numa == best_numa &&
                      strcmp(nic->name, list->nics[best].name) < 0);
        if (better) {
            best = i;
            best_port = first_active;
            best_affinity = affinity;
            best_numa = numa;
        }
    }
    if (best >= 0 && port)
        *port = best_port;
    return best;
}
