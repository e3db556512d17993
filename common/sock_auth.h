/* Shared-secret authentication of Tandem's ZeroMQ sockets with CURVE
 * (CurveZMQ: X25519 key agreement, then every frame encrypted and
 * authenticated).
 *
 * Every process that may join gets the same secret file (--worker-secret-file
 * for the worker socket). From it both sides derive, with BLAKE2b
 * (libsodium crypto_generichash) and distinct labels, a server key pair and
 * one client key pair: the router's socket is the CURVE server with the
 * server secret key, a worker connects as a CURVE client with the client key
 * pair and the server public key, and the router's ZAP handler accepts a
 * connection only if its client public key is the derived one. Without the
 * secret a peer can neither complete the handshake (it cannot know the
 * server key) nor pass the ZAP check, so it cannot register, heartbeat, or
 * send or read a single message; with it everything on the socket is
 * encrypted. docs/SECURITY.md has the threat model. */
#ifndef TANDEM_COMMON_SOCK_AUTH_H
#define TANDEM_COMMON_SOCK_AUTH_H
#include <stddef.h>

#define SOCK_AUTH_MIN_SECRET 32 /* bytes of secret material in the file */

typedef struct sock_auth {
    int enabled;
    char server_public[41], server_secret[41]; /* Z85 text, as ZeroMQ takes keys */
    char client_public[41], client_secret[41];
    unsigned char client_public_raw[32];       /* what the ZAP handler compares */
} sock_auth;

/* Reads the secret from path (surrounding whitespace ignored; at least
 * SOCK_AUTH_MIN_SECRET bytes, e.g. `head -c 32 /dev/urandom | base64`) and
 * derives the keys; label separates sockets with the same secret ("workers",
 * "rpc"). Returns 0, or -1 with a reason (file unreadable, secret too short). */
int sock_auth_load(sock_auth *a, const char *path, const char *label, char *err, size_t errlen);
/* Erases the keys. */
void sock_auth_wipe(sock_auth *a);

/* Makes sock (before bind) a CURVE server whose clients the ZAP handler
 * checks under domain. Returns 0 or -1 with errno. */
int sock_auth_server(void *sock, const sock_auth *a, const char *domain);
/* Makes sock (before connect) a CURVE client of a's server. */
int sock_auth_client(void *sock, const sock_auth *a);

/* The ZAP handler of zctx: a REP socket on inproc://zeromq.zap.01 that the
 * owner polls and answers with sock_auth_zap_handle. NULL with a reason on
 * failure. */
void *sock_auth_zap_open(void *zctx, char *err, size_t errlen);
/* Answers every pending ZAP request: 200 for a CURVE client whose public
 * key is the one derived for the domain's socket, 400 otherwise. auths[i]
 * serves domains[i]. Never blocks. Returns how many were refused. */
int sock_auth_zap_handle(void *zap, const sock_auth *const *auths, const char *const *domains,
                         int n);

#endif
