/*
 * cmd_token.c — `once token [--operator] NAME`: a fresh bearer token for an
 * agent (or an operator), and the tokens_file line that admits it. The line
 * holds the token's SHA-256, not the token, so the file leaks nothing if
 * read; the token itself is printed once and kept nowhere.
 */
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "cli/cli.h"
#include "common/digest.h"
#include "common/hex.h"

/* 256 bits: not guessable, and not worth brute-forcing from the digest. */
#define TOKEN_BYTES 32
/* Tokens say what they are when found in a log or a paste. */
#define TOKEN_PREFIX "once_"
#define TOKEN_PREFIX_LEN (sizeof TOKEN_PREFIX - 1)

/* What `once help token` says beyond the usage, next to the code. */
const char cli_token_help[] =
    "Prints two lines: the token (give it to the agent; it is not kept anywhere) and\n"
    "the line to add to the gateway's tokens_file, \"sha256:HEX agent NAME\" (or\n"
    "operator), HEX the token's SHA-256, so the file holds no token. NAME is 1-64 of\n"
    "A-Z a-z 0-9 . _ - and names the agent in the ledger, the logs and [agent.NAME].\n"
    "Then reload the gateway (SIGHUP). No store is opened.\n"
    "\n"
    "Options:\n"
    "  --operator   a token for a person who decides (approve, deny, resolve)\n";

/* A fresh token into token (TOKEN_PREFIX and 2 * TOKEN_BYTES hex digits,
 * NUL-ended) and the hex SHA-256 of its text into digest. 0, or -1 with
 * the failure reported. The random bytes are wiped once spelt out. */
static int token_make(char token[TOKEN_PREFIX_LEN + 2 * TOKEN_BYTES + 1], char digest[65])
{
    unsigned char raw[TOKEN_BYTES];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        cli_print_error("cannot draw random bytes for a token");
        return -1;
    }
    memcpy(token, TOKEN_PREFIX, TOKEN_PREFIX_LEN);
    hex_encode(raw, sizeof raw, token + TOKEN_PREFIX_LEN);
    OPENSSL_cleanse(raw, sizeof raw);
    if (digest_sha256_hex(token, strlen(token), digest) != 0) {
        cli_print_error("cannot compute a SHA-256");
        return -1;
    }
    return 0;
}

/* NAME checked before anything is drawn, then the two lines. Nothing but
 * the terminal ever holds the token: no store, no file. */
int cli_token_run(cli_ctx *ctx, int argc, char **argv)
{
    int operator = 0;
    const struct option opts[] = {{"operator", no_argument, &operator, 1}, CLI_LONGOPTS_COMMON};
    if (cli_parse_options(ctx, argc, argv, CLI_SHORTOPTS, opts, NULL, NULL) == CLI_GETOPT_DONE)
        return ctx->exit_code;
    if (optind >= argc)
        return cli_fail_usage(ctx->cmd, "missing NAME");
    if (optind + 1 < argc)
        return cli_fail_usage(ctx->cmd, "too many arguments");
    const char *name = argv[optind];
    int code = cli_check_agent_name(ctx->cmd, name);
    if (code != CLI_EXIT_OK)
        return code;
    char token[TOKEN_PREFIX_LEN + 2 * TOKEN_BYTES + 1];
    char digest[65];
    if (token_make(token, digest) != 0)
        return CLI_EXIT_STORE; /* 2: a failure the caller cannot fix */
    printf("%s\nsha256:%s %s %s\n", token, digest, operator ? "operator" : "agent", name);
    OPENSSL_cleanse(token, sizeof token);
    return cli_finish_stdout(CLI_EXIT_OK);
}
