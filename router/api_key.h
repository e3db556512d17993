/* The router's API key: read once from --api-key-file, kept only as a
 * BLAKE2b-256 hash, and compared in constant time with the bearer token of
 * each HTTP request (docs/SECURITY.md). */
#ifndef TANDEM_ROUTER_API_KEY_H
#define TANDEM_ROUTER_API_KEY_H
#include <stddef.h>

/* Reads the key from path (surrounding whitespace ignored; at least 32
 * bytes, since the same key also derives the RPC socket's CURVE keys) and
 * writes its hash. Returns 0, or -1 with a reason. */
int api_key_hash_file(const char *path, unsigned char hash[32], char *err, size_t errlen);

/* 1 when the Authorization header value is "Bearer KEY" for the hashed
 * key, 0 otherwise (NULL header included). */
int api_key_check(const unsigned char hash[32], const char *authorization);

#endif
