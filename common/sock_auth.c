#include "common/sock_auth.h"
#include "common/status.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define SECRET_MAX 4096

/* A key pair from BLAKE2b(label, secret) as the seed. */
static int derive(const unsigned char *secret, size_t n, const char *label, const char *role,
                  unsigned char pk[32], unsigned char sk[32])
{
    unsigned char seed[crypto_box_SEEDBYTES];
    crypto_generichash_state st;
    char tag[128];
    snprintf(tag, sizeof tag, "tandem %s socket %s key", label, role);
    if (crypto_generichash_init(&st, NULL, 0, sizeof seed) != 0 ||
        crypto_generichash_update(&st, (const unsigned char *)tag, strlen(tag) + 1) != 0 ||
        crypto_generichash_update(&st, secret, n) != 0 ||
        crypto_generichash_final(&st, seed, sizeof seed) != 0)
        return -1;
    int rc = crypto_box_seed_keypair(pk, sk, seed);
    sodium_memzero(seed, sizeof seed);
    return rc;
}

int sock_auth_load(sock_auth *a, const char *path, const char *label, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium cannot initialise");
        return TN_ERR_ARG;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read the secret file %s: %s", path, strerror(errno));
        return TN_ERR_SYS;
    }
    unsigned char *buf = sodium_malloc(SECRET_MAX + 1);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return TN_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, SECRET_MAX + 1, f);
    int too_big = n > SECRET_MAX;
    fclose(f);
    size_t start = 0;
    while (start < n && (buf[start] == ' ' || buf[start] == '\t' || buf[start] == '\n' ||
                         buf[start] == '\r'))
        start++;
    while (n > start && (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\n' ||
                         buf[n - 1] == '\r'))
        n--;
    int rc = -1;
    unsigned char spk[32], ssk[32], csk[32];
    if (too_big) {
        snprintf(err, errlen, "%s: a secret file holds at most %d bytes", path, SECRET_MAX);
    } else if (n - start < SOCK_AUTH_MIN_SECRET) {
        snprintf(err, errlen, "%s: the secret must be at least %d bytes (e.g. `head -c 32 "
                 "/dev/urandom | base64 > FILE`)", path, SOCK_AUTH_MIN_SECRET);
    } else if (derive(buf + start, n - start, label, "server", spk, ssk) != 0 ||
               derive(buf + start, n - start, label, "client", a->client_public_raw, csk) != 0) {
        snprintf(err, errlen, "cannot derive keys");
    } else if (!zmq_z85_encode(a->server_public, spk, 32) ||
               !zmq_z85_encode(a->server_secret, ssk, 32) ||
               !zmq_z85_encode(a->client_public, a->client_public_raw, 32) ||
               !zmq_z85_encode(a->client_secret, csk, 32)) {
        snprintf(err, errlen, "cannot encode keys");
    } else {
        a->enabled = 1;
        rc = 0;
    }
    sodium_memzero(ssk, sizeof ssk);
    sodium_memzero(csk, sizeof csk);
    sodium_free(buf);
    if (rc != 0)
        sock_auth_wipe(a);
    return rc;
}

void sock_auth_wipe(sock_auth *a)
{
    sodium_memzero(a, sizeof *a);
}

int sock_auth_server(void *sock, const sock_auth *a, const char *domain)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->server_secret, 40) != 0)
        return -1;
    return 0;
}

int sock_auth_client(void *sock, const sock_auth *a)
{
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, a->server_public, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, a->client_public, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->client_secret, 40) != 0)
        return -1;
    return 0;
}

void *sock_auth_zap_open(void *zctx, char *err, size_t errlen)
{
    void *s = zmq_socket(zctx, ZMQ_REP);
    int linger = 0;
    if (s)
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (!s || zmq_bind(s, "inproc://zeromq.zap.01") != 0) {
        snprintf(err, errlen, "cannot start the ZAP handler: %s", zmq_strerror(errno));
        if (s)
            zmq_close(s);
        return NULL;
    }
    return s;
}

/* Sends one reply frame (more: another follows). */
static void send_frame(void *zap, const void *p, size_t n, int more)
{
    zmq_send(zap, p, n, more ? ZMQ_SNDMORE : 0);
}

int sock_auth_zap_handle(void *zap, const sock_auth *const *auths, const char *const *domains,
                         int n)
{
    int refused = 0;
    for (;;) {
        /* A ZAP request (RFC 27): version, request id, domain, address,
         * routing id, mechanism, then the mechanism's credentials. */
        char frames[8][256];
        size_t lens[8];
        int count = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, zap, count == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(&m);
                if (count == 0)
                    return refused; /* nothing pending */
                break;
            }
            if (count < 8) {
                size_t len = zmq_msg_size(&m);
                lens[count] = len < sizeof frames[0] ? len : sizeof frames[0];
                memcpy(frames[count], zmq_msg_data(&m), lens[count]);
            }
            count++;
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        int ok = 0;
        if (count >= 7 && lens[5] == 5 && !memcmp(frames[5], "CURVE", 5) && lens[6] == 32) {
            for (int i = 0; i < n && !ok; i++)
                ok = auths[i] && auths[i]->enabled && lens[2] == strlen(domains[i]) &&
                     !memcmp(frames[2], domains[i], lens[2]) &&
                     sodium_memcmp(frames[6], auths[i]->client_public_raw, 32) == 0;
        }
        refused += !ok;
        send_frame(zap, "1.0", 3, 1);
        send_frame(zap, count >= 2 ? frames[1] : "", count >= 2 ? lens[1] : 0, 1);
        send_frame(zap, ok ? "200" : "400", 3, 1);
        send_frame(zap, ok ? "OK" : "unknown client key", ok ? 2 : 18, 1);
        send_frame(zap, "", 0, 1); /* user id */
        send_frame(zap, "", 0, 0); /* metadata */
    }
}
