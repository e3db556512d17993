/* The engine: UCX context and worker, NIC choice, progress, and the
 * receiver half of the notice/ack protocol. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "proto/transfer.pb-c.h"
#include "transfer/transfer_internal.h"
#include "transfer/transfer_nic.h"

double te_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int te_fail(te_engine *e, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
    return status;
}

void te_log(te_engine *e, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(e->log, "%s: %s\n", e->name, line);
    fflush(e->log);
}

int te_request_started(ucs_status_ptr_t sp, ucs_status_t *st)
{
    if (sp == NULL) {
        *st = UCS_OK;
        return 0;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        *st = UCS_PTR_STATUS(sp);
        return -1;
    }
    *st = UCS_INPROGRESS;
    return 1;
}

void te_engine_config_default(te_engine_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->numa_node = -1;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

/* AM callbacks run inside ucp_worker_progress: they only decode and queue;
 * the acks are sent from te_engine_progress, outside UCX's callback. */
typedef void (*header_handler)(te_engine *e, const ProtobufCMessage *msg);

/* Decodes a header-only AM as a desc message and hands it to handle; a
 * malformed one is logged (what names it) and dropped. */
static ucs_status_t on_header(te_engine *e, const void *header, size_t header_length,
                              const ProtobufCMessageDescriptor *desc, const char *what,
                              header_handler handle)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, header_length, header);
    if (!m) {
        te_log(e, "dropped a malformed transfer %s (%zu bytes)", what, header_length);
        return UCS_OK;
    }
    handle(e, m);
    protobuf_c_message_free_unpacked(m, NULL);
    return UCS_OK;
}

static void handle_notice(te_engine *e, const ProtobufCMessage *msg)
{
    const Tandem__Transfer__TransferNotice *m = (const Tandem__Transfer__TransferNotice *)msg;
    if (grow((void **)&e->notices, &e->cap_notices, e->n_notices + 1, sizeof *e->notices) ||
        grow((void **)&e->acks, &e->cap_acks, e->n_acks + 1, sizeof *e->acks)) {
        te_log(e, "out of memory queueing the notice of request %llu",
               (unsigned long long)m->request_id);
        return;
    }
    te_notice *n = &e->notices[e->n_notices++];
    n->sender_id = m->sender_id;
    n->request_id = m->request_id;
    n->status = m->status == TANDEM__TRANSFER__NOTICE_STATUS__NOTICE_COMPLETE
                    ? TN_OK : TN_ERR_CANCELED;
    n->bytes = m->bytes;
    n->copies = m->copies;
    int incomplete = 0;
    if (m->data_in_messages) {
        uint64_t got = te_receipt_take(e, m->sender_id, m->transfer_id);
        if (n->status == TN_OK && got != m->bytes) {
            /* Never seen (one lane keeps the messages in order): fail the
             * transfer on both sides rather than report pages complete. */
            te_log(e, "transfer %llu of engine %016llx (request %llu): %llu of %llu bytes "
                   "arrived; reported unfinished", (unsigned long long)m->transfer_id,
                   (unsigned long long)m->sender_id, (unsigned long long)m->request_id,
                   (unsigned long long)got, (unsigned long long)m->bytes);
            n->status = TN_ERR_CANCELED;
            incomplete = 1;
        }
    }
    e->acks[e->n_acks++] = (te_pending_ack){.sender_id = m->sender_id,
                                            .transfer_id = m->transfer_id,
                                            .incomplete = incomplete};
}

static void handle_ack(te_engine *e, const ProtobufCMessage *msg)
{
    const Tandem__Transfer__TransferAck *m = (const Tandem__Transfer__TransferAck *)msg;
    te_transfer_on_ack(e, m->transfer_id, m->incomplete);
}

static ucs_status_t on_notice(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    (void)data, (void)length, (void)param;
    return on_header(arg, header, header_length, &tandem__transfer__transfer_notice__descriptor,
                     "notice", handle_notice);
}

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    (void)data, (void)length, (void)param;
    return on_header(arg, header, header_length, &tandem__transfer__transfer_ack__descriptor,
                     "ack", handle_ack);
}

typedef struct ack_op {
    te_engine *e;
    te_peer *peer;
    size_t len;
    uint8_t buf[64];
} ack_op;

static void ack_sent(void *request, ucs_status_t status, void *user_data)
{
    ack_op *op = user_data;
    op->e->outstanding--;
    op->peer->acks_in_flight--;
    /* Sent over connected lanes: the endpoint's wire-up is over. */
    if (status == UCS_OK && op->peer->wireup == TE_WIREUP_UNKNOWN)
        op->peer->wireup = TE_WIREUP_DONE;
    if (status != UCS_OK)
        te_log(op->e, "sending a transfer ack failed: %s", ucs_status_string(status));
    free(op);
    ucp_request_free(request);
}

/* Sends one ack on p; returns 0 when it went (or failed for good), -1
 * when it must wait for a usable endpoint. */
static int send_ack(te_engine *e, te_peer *p, const te_pending_ack *a)
{
    ack_op *op = malloc(sizeof *op);
    if (!op) {
        te_log(e, "out of memory acknowledging transfer %llu",
               (unsigned long long)a->transfer_id);
        return -1;
    }
    Tandem__Transfer__TransferAck m = TANDEM__TRANSFER__TRANSFER_ACK__INIT;
    m.receiver_id = e->id;
    m.transfer_id = a->transfer_id;
    m.incomplete = a->incomplete;
    op->e = e;
    op->peer = p;
    op->len = tandem__transfer__transfer_ack__pack(&m, op->buf);
    ucp_request_param_t prm = {0};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.cb.send = ack_sent;
    prm.user_data = op;
    ucs_status_t st;
    int started = te_request_started(
        ucp_am_send_nbx(p->ep, TE_AM_ACK, op->buf, op->len, NULL, 0, &prm), &st);
    if (started == 1) {
        e->outstanding++;
        p->acks_in_flight++;
        return 0;
    }
    if (started == 0 && p->wireup == TE_WIREUP_UNKNOWN)
        p->wireup = TE_WIREUP_DONE; /* sent at once: the lanes are connected */
    free(op);
    if (started < 0) {
        te_log(e, "sending the ack of transfer %llu failed: %s; retrying on a new endpoint",
               (unsigned long long)a->transfer_id, ucs_status_string(st));
        return -1;
    }
    return 0;
}

/* Sends the acks of received notices. An ack whose sender has no usable
 * endpoint stays queued: the owner reconnects failed peers (a fresh
 * te_peer_connect to the same engine), and the ack goes out on the new
 * endpoint; after TE_ACK_RETRY_S it is dropped (the sender's transfer has
 * timed out by then). */
static void send_pending_acks(te_engine *e)
{
    double now = te_now_seconds();
    size_t kept = 0;
    for (size_t i = 0; i < e->n_acks; i++) {
        te_pending_ack *a = &e->acks[i];
        if (!a->first_tried)
            a->first_tried = now;
        te_peer *p = te_peer_find(e, a->sender_id);
        int usable = p && p->status == TN_OK && p->ep;
        if (usable && send_ack(e, p, a) == 0) {
            if (a->logged)
                te_log(e, "acknowledged transfer %llu of engine %016llx on a new endpoint",
                       (unsigned long long)a->transfer_id, (unsigned long long)a->sender_id);
            continue;
        }
        if (now - a->first_tried >= TE_ACK_RETRY_S) {
            te_log(e, "cannot acknowledge transfer %llu of engine %016llx: %s; gave up after "
                   "%.0f s", (unsigned long long)a->transfer_id,
                   (unsigned long long)a->sender_id,
                   p ? (p->status != TN_OK ? p->error : "endpoint closed")
                     : "no peer connected to it", TE_ACK_RETRY_S);
            continue;
        }
        if (!a->logged && !usable) {
            te_log(e, "cannot acknowledge transfer %llu of engine %016llx yet: %s; waiting "
                   "for a new endpoint", (unsigned long long)a->transfer_id,
                   (unsigned long long)a->sender_id,
                   p ? (p->status != TN_OK ? p->error : "endpoint closed")
                     : "no peer connected to it");
            a->logged = 1;
        }
        e->acks[kept++] = *a;
    }
    e->n_acks = kept;
}

int te_engine_progress(te_engine *e)
{
    int events = 0;
    for (int i = 0; i < 64; i++) {
        unsigned n = ucp_worker_progress(e->worker);
        if (!n)
            break;
        events += (int)n;
    }
    if (e->n_acks)
        send_pending_acks(e);
    if (e->n_receipts)
        te_receipts_prune(e, te_now_seconds());
    /* Failed peers are force-closed here, outside the error callback (UCX
     * requires a FORCE close of a failed endpoint); peers left open are
     * closed once that is safe. */
    te_peers_close_pending(e);
    double now = te_now_seconds();
    for (te_transfer *t = e->transfers; t; t = t->next)
        te_transfer_advance(t, now);
    /* A failure seen above may allow a close: start it now. */
    te_peers_close_pending(e);
    te_transfer_sweep(e);
    return events;
}

int te_engine_arm(te_engine *e, int *fd)
{
    *fd = -1;
    if (e->event_fd < 0)
        return 0;
    /* ucp_worker_arm wants the worker drained first; a BUSY answer means
     * events came in meanwhile. The engine's own progress, not a bare
     * ucp_worker_progress, so failed peers are closed the engine's way
     * (a bare call here once hit a UCX fatal error in a tcp endpoint's
     * destroy after its decoder was killed, under heavy load). */
    if (te_engine_progress(e))
        return 1;
    ucs_status_t st = ucp_worker_arm(e->worker);
    if (st == UCS_ERR_BUSY)
        return 1;
    if (st != UCS_OK) {
        te_log(e, "ucp_worker_arm: %s; waiting on timeouts from now on",
               ucs_status_string(st));
        e->event_fd = -1;
        return 0;
    }
    *fd = e->event_fd;
    return 0;
}

size_t te_engine_outstanding(const te_engine *e) { return e->outstanding; }
size_t te_engine_abandoned(const te_engine *e) { return e->abandoned; }
uint64_t te_engine_id(const te_engine *e) { return e->id; }
const char *te_engine_nic(const te_engine *e) { return e->nic; }

int te_engine_cuda_memory(const te_engine *e)
{
    ucp_context_attr_t a = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (!e || ucp_context_query(e->ctx, &a) != UCS_OK)
        return 0;
    return (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}
const char *te_engine_error(const te_engine *e) { return e->error; }

size_t te_engine_acks_waiting(const te_engine *e, uint64_t sender_id)
{
    size_t n = 0;
    for (size_t i = 0; i < e->n_acks; i++)
        n += e->acks[i].sender_id == sender_id;
    return n;
}

void te_engine_address(const te_engine *e, const void **addr, size_t *len)
{
    *addr = e->address;
    *len = e->address_len;
}

int te_engine_next_notice(te_engine *e, te_notice *out)
{
    if (!e->n_notices)
        return 0;
    *out = e->notices[0];
    memmove(e->notices, e->notices + 1, (e->n_notices - 1) * sizeof *e->notices);
    e->n_notices--;
    return 1;
}

/* Busy-polls while UCX reports events, then backs off with short sleeps so
 * an idle waiter does not starve its peer of one of two cores. */
void te_idle_backoff(int *idle)
{
    if (++*idle < 32)
        return;
    struct timespec ts = {0, *idle < 256 ? 2000 : 50000};
    nanosleep(&ts, NULL);
}

int te_engine_wait_notice(te_engine *e, te_notice *out, int timeout_ms)
{
    double deadline = te_now_seconds() + timeout_ms / 1000.0;
    int idle = 0;
    for (;;) {
        if (te_engine_progress(e))
            idle = 0;
        if (te_engine_next_notice(e, out))
            return 1;
        if (te_now_seconds() >= deadline)
            return 0;
        te_idle_backoff(&idle);
    }
}

/* UCX_NET_DEVICES only makes sense to pin to a verbs port when the
 * transports UCX may use include verbs ones. */
static int tls_may_use_verbs(const char *tls)
{
    if (!tls || !*tls || strstr(tls, "all"))
        return 1;
    static const char *const verbs[] = {"rc", "dc", "ud", "ib"};
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++)
        if (strstr(tls, verbs[i]))
            return 1;
    return 0;
}

/* UCX 1.13's shared-memory AM transports (posix, sysv) cannot report a
 * peer's failure, so endpoints restricted to them must be created without
 * UCP_ERR_HANDLING_MODE_PEER (UCX refuses the endpoint otherwise). Such
 * peers rely on the transfer timeout and the receiver's ack to notice a
 * dead receiver. */
static int tls_is_shared_memory_only(const char *tls)
{
    if (!tls || !*tls || tls[0] == '^')
        return 0;
    static const char *const shm[] = {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "self"};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", tls);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (size_t i = 0; i < sizeof shm / sizeof *shm && !found; i++)
            found = strcmp(tok, shm[i]) == 0;
        if (!found)
            return 0;
    }
    return 1;
}

/* Decides UCX_NET_DEVICES and writes the one log line about it. */
static int choose_nic(te_engine *e, const te_engine_config *cfg, ucp_config_t *uc)
{
    const char *tls = cfg->tls ? cfg->tls : getenv("UCX_TLS");
    const char *env_dev = getenv("UCX_NET_DEVICES");
    te_nic_list nics;
    if (te_nic_discover(&nics) != 0) {
        te_nic_list_free(&nics);
        return te_fail(e, TN_ERR_NOMEM, "%s", nics.note);
    }
    int rc = TN_OK;
    if (cfg->net_devices || env_dev) {
        const char *dev = cfg->net_devices ? cfg->net_devices : env_dev;
        snprintf(e->nic, sizeof e->nic, "%s", dev);
        if (cfg->net_devices && ucp_config_modify(uc, "NET_DEVICES", dev) != UCS_OK)
            rc = te_fail(e, TN_ERR_ARG, "UCX rejects NET_DEVICES=%s", dev);
        else
            te_log(e, "NIC %s (%s); libibverbs: %s", dev,
                   cfg->net_devices ? "configured" : "from UCX_NET_DEVICES", nics.note);
    } else if (nics.n == 0) {
        snprintf(e->nic, sizeof e->nic, "ucx-default");
        te_log(e, "%s; UCX chooses the transport itself (UCX_TLS=%s)", nics.note,
               tls ? tls : "all");
    } else {
        int port = 0;
        int idx = te_nic_select(&nics, cfg->near_pci_path, cfg->numa_node, &port);
        if (idx < 0 || !tls_may_use_verbs(tls)) {
            snprintf(e->nic, sizeof e->nic, "ucx-default");
            te_log(e, "%s; %s, UCX chooses the transport itself (UCX_TLS=%s)", nics.note,
                   idx < 0 ? "none is active" : "UCX_TLS excludes verbs", tls ? tls : "all");
        } else {
            const te_nic *n = &nics.nics[idx];
            snprintf(e->nic, sizeof e->nic, "%s:%d", n->name, port);
            if (ucp_config_modify(uc, "NET_DEVICES", e->nic) != UCS_OK)
                rc = te_fail(e, TN_ERR_TRANSPORT, "UCX rejects NET_DEVICES=%s", e->nic);
            else
                te_log(e, "%s; using NIC %s (numa node %d%s%s)", nics.note, e->nic,
                       n->numa_node, n->pci_path[0] ? ", " : "", n->pci_path);
        }
    }
    te_nic_list_free(&nics);
    return rc;
}

static int create_ucx(te_engine *e, const te_engine_config *cfg)
{
    ucp_config_t *uc;
    ucs_status_t st = ucp_config_read(NULL, NULL, &uc);
    if (st != UCS_OK)
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_config_read: %s", ucs_status_string(st));
    if (cfg->tls && ucp_config_modify(uc, "TLS", cfg->tls) != UCS_OK) {
        ucp_config_release(uc);
        return te_fail(e, TN_ERR_ARG, "UCX rejects TLS=%s", cfg->tls);
    }
    const char *tls = cfg->tls ? cfg->tls : getenv("UCX_TLS");
    e->peer_failure_mode = !tls_is_shared_memory_only(tls);
    e->same_host_shm = cfg->same_host_shm;
    e->tls_allows_shm = te_tls_allows_shm(tls);
    te_host_key_fill(e->host_key, sizeof e->host_key);
    int rc = choose_nic(e, cfg, uc);
    if (rc != TN_OK) {
        ucp_config_release(uc);
        return rc;
    }
    ucp_params_t params = {0};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                        UCP_PARAM_FIELD_NAME;
    /* WAKEUP: the owner's poll wakes on UCX events (te_engine_arm). */
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    params.name = e->name;
    st = ucp_init(&params, uc, &e->ctx);
    ucp_config_release(uc);
    if (st != UCS_OK) {
        e->ctx = NULL;
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_init (UCX_TLS=%s): %s",
                       cfg->tls ? cfg->tls : "default", ucs_status_string(st));
    }
    ucp_worker_params_t wp = {0};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(e->ctx, &wp, &e->worker);
    if (st != UCS_OK) {
        e->worker = NULL;
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_worker_create: %s", ucs_status_string(st));
    }
    st = ucp_worker_get_efd(e->worker, &e->event_fd);
    if (st != UCS_OK) {
        te_log(e, "ucp_worker_get_efd: %s; the worker's waits end on timeouts only",
               ucs_status_string(st));
        e->event_fd = -1;
    }
    ucp_worker_attr_t wa = {0};
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    st = ucp_worker_query(e->worker, &wa);
    if (st != UCS_OK)
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_worker_query: %s", ucs_status_string(st));
    e->max_am_header = wa.max_am_header;
    /* Notices and acks travel as AM headers (at most ~60 packed bytes). */
    if (e->max_am_header < 64)
        return te_fail(e, TN_ERR_TRANSPORT, "UCX allows only %zu-byte AM headers, notices need 64",
                       e->max_am_header);
    st = ucp_worker_get_address(e->worker, &e->address, &e->address_len);
    if (st != UCS_OK) {
        e->address = NULL;
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_worker_get_address: %s", ucs_status_string(st));
    }
    ucp_am_handler_param_t hp = {0};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.arg = e;
    hp.id = TE_AM_NOTICE;
    hp.cb = on_notice;
    st = ucp_worker_set_am_recv_handler(e->worker, &hp);
    if (st == UCS_OK) {
        hp.id = TE_AM_ACK;
        hp.cb = on_ack;
        st = ucp_worker_set_am_recv_handler(e->worker, &hp);
    }
    if (st == UCS_OK) {
        hp.id = TE_AM_DATA;
        hp.cb = te_on_data;
        st = ucp_worker_set_am_recv_handler(e->worker, &hp);
    }
    if (st != UCS_OK)
        return te_fail(e, TN_ERR_TRANSPORT, "ucp_worker_set_am_recv_handler: %s",
                       ucs_status_string(st));
    return TN_OK;
}

int te_engine_create(const te_engine_config *cfg, te_engine **out, char *err, size_t err_len)
{
    te_engine_config defaults;
    if (!out) {
        snprintf(err, err_len, "te_engine_create: out is NULL");
        return TN_ERR_ARG;
    }
    *out = NULL;
    if (!cfg) {
        te_engine_config_default(&defaults);
        cfg = &defaults;
    }
    if (cfg->data_path != TE_DATA_AUTO && cfg->data_path != TE_DATA_PUTS &&
        cfg->data_path != TE_DATA_MESSAGES) {
        snprintf(err, err_len, "unknown data path %d", (int)cfg->data_path);
        return TN_ERR_ARG;
    }
    if (cfg->max_puts_in_flight < 0) {
        snprintf(err, err_len, "max_puts_in_flight %d is negative", cfg->max_puts_in_flight);
        return TN_ERR_ARG;
    }
    te_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_len, "out of memory creating the transfer engine");
        return TN_ERR_NOMEM;
    }
    snprintf(e->name, sizeof e->name, "%s", cfg->name ? cfg->name : "transfer");
    e->log = cfg->log ? cfg->log : stderr;
    e->max_in_flight = cfg->max_puts_in_flight ? cfg->max_puts_in_flight : 64;
    e->data_path = cfg->data_path;
    e->next_transfer_id = 1;
    e->event_fd = -1;
    if (getrandom(&e->id, sizeof e->id, 0) != (ssize_t)sizeof e->id || e->id == 0)
        e->id = ((uint64_t)getpid() << 32) ^ (uint64_t)(te_now_seconds() * 1e9);
    int rc = create_ucx(e, cfg);
    if (rc != TN_OK) {
        snprintf(err, err_len, "%s", e->error);
        te_engine_destroy(e);
        return rc;
    }
    *out = e;
    return TN_OK;
}

/* Requests UCX may never complete because they belong to a live endpoint
 * that cannot be closed yet (te_peer_close_safe). */
static size_t stuck_requests(const te_engine *e)
{
    size_t n = 0;
    for (const te_peer *p = e->peers; p; p = p->next) {
        if (!p->ep || p->close_req || te_peer_close_safe(e, p))
            continue;
        n += (size_t)(p->wireup == TE_WIREUP_FLUSHING) + (size_t)p->acks_in_flight;
        for (const te_transfer *t = e->transfers; t; t = t->next)
            if (t->peer == p && !t->abandoned)
                n += (size_t)t->in_flight;
    }
    return n;
}

void te_engine_destroy(te_engine *e)
{
    if (!e)
        return;
    /* Cancel what is still running and close every endpoint; a force close
     * completes outstanding requests (UCS_ERR_CANCELED) so nothing UCX holds
     * calls back into freed memory. An endpoint still wiring up is first
     * given a bounded chance to finish (te_peer_close_safe). */
    for (te_transfer *t = e->transfers; t; t = t->next)
        if (t->status == TN_IN_PROGRESS) {
            t->canceled = 1;
            if (!t->failure)
                t->failure = TN_ERR_CANCELED;
        }
    int leave_worker = 0;
    if (e->worker) {
        for (te_peer *p = e->peers; p; p = p->next)
            if (p->ep && !p->close_req && p->detects_failure && !p->ucx_failed)
                te_peer_wireup_flush(e, p);
        /* A live peer finishes a wire-up within the grace period; what is
         * still stuck after it waits for a peer that does not answer. */
        double now = te_now_seconds(), grace = now + 1.0, deadline = now + 5.0;
        int idle = 0;
        for (;;) {
            for (te_peer *p = e->peers; p; p = p->next)
                te_peer_start_close(e, p);
            now = te_now_seconds();
            if (e->outstanding <= e->abandoned || now >= deadline ||
                (now >= grace && e->outstanding <= e->abandoned + stuck_requests(e)))
                break;
            if (ucp_worker_progress(e->worker))
                idle = 0;
            te_idle_backoff(&idle);
        }
        for (te_peer *p = e->peers; p; p = p->next)
            if (p->ep && p->detects_failure && !te_peer_close_safe(e, p)) {
                te_log(e, "peer %016llx: endpoint still %s; leaving the UCX worker to the "
                       "process's exit (destroying it now would abort UCX 1.13)",
                       (unsigned long long)p->remote_id,
                       p->wireup != TE_WIREUP_DONE ? "setting up its connection"
                                                   : "has requests to a peer that does not answer");
                leave_worker = 1;
            }
        if (!leave_worker && e->outstanding > e->abandoned)
            te_log(e, "%zu UCX requests did not complete within 5 s of destroy",
                   e->outstanding - e->abandoned);
    }
    if (leave_worker) {
        /* Nothing calls UCX again, so no callback can reach the objects
         * freed below; UCX's own memory goes with the process. */
        while (e->transfers)
            te_transfer_free(e, e->transfers);
        for (te_peer *p = e->peers; p; p = p->next)
            for (te_remote_region *r = p->regions; r; r = r->next)
                r->rkey = NULL;
        while (e->peers)
            te_peer_free(e, e->peers);
        while (e->regions) {
            te_region *r = e->regions;
            e->regions = r->next;
            free(r);
        }
        free(e->notices);
        free(e->acks);
        free(e->receipts);
        free(e);
        return;
    }
    /* Remote keys come from the worker's memory pool: release them before
     * the worker. The worker then releases endpoints UCX could not close
     * (and their stuck requests); only after that may the transfers and
     * peers their callbacks point at be freed. */
    for (te_peer *p = e->peers; p; p = p->next)
        for (te_remote_region *r = p->regions; r; r = r->next)
            if (r->rkey) {
                ucp_rkey_destroy(r->rkey);
                r->rkey = NULL;
            }
    if (e->address)
        ucp_worker_release_address(e->worker, e->address);
    if (e->worker)
        ucp_worker_destroy(e->worker);
    while (e->transfers)
        te_transfer_free(e, e->transfers);
    while (e->peers)
        te_peer_free(e, e->peers);
    while (e->regions)
        te_region_free(e, e->regions);
    if (e->ctx)
        ucp_cleanup(e->ctx);
    free(e->notices);
    free(e->acks);
    free(e->receipts);
    free(e);
}
