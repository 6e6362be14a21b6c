// A real OAuth 2.1 authorization server for the [auth] tests (docs/auth.md): npm `oidc-provider`
// (pinned in package-lock.json) on 127.0.0.1, issuing JWT access tokens for a resource by client
// credentials — what an organisation's identity provider does for its agents.
//
//   node oidc_issuer.mjs CONFIG.json
//
// CONFIG: {"port": P (0: any), "issuer": URL (default http://127.0.0.1:PORT), "keys": [private JWK...]
//          (default: one fresh RSA key), "alg": "RS256"|"PS256"|"ES256",
//          "clients": [{"client_id","client_secret","scope"}], "scope": "space separated scopes",
//          "tls_cert": PEM file, "tls_key": PEM file (then it serves HTTPS; issuer https://127.0.0.1:PORT),
//          "ttl": seconds of a token}
// Prints one line {"port": P, "issuer": URL, "jwks": {public JWKS}} once it listens, then serves
// until killed. Every resource indicator gets a JWT access token with that resource as its aud.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import crypto from 'node:crypto';
import Provider from 'oidc-provider';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const alg = cfg.alg ?? 'RS256';

function freshKey() {
    const kid = crypto.randomBytes(8).toString('hex');
    const { privateKey } = alg === 'ES256'
        ? crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
        : crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
    return { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

const keys = cfg.keys ?? [freshKey()];
const tls = cfg.tls_cert ? { cert: fs.readFileSync(cfg.tls_cert), key: fs.readFileSync(cfg.tls_key) } : null;
const server = tls ? https.createServer(tls) : http.createServer();
await new Promise(r => server.listen(cfg.port ?? 0, '127.0.0.1', r));
const port = server.address().port;
const issuer = cfg.issuer ?? `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
const scope = cfg.scope ?? 'mcp once:operator';

const provider = new Provider(issuer, {
    clients: (cfg.clients ?? []).map(c => ({
        client_id: c.client_id, client_secret: c.client_secret, scope: c.scope ?? scope,
        grant_types: ['client_credentials'], response_types: [], redirect_uris: [],
        token_endpoint_auth_method: 'client_secret_basic'
    })),
    jwks: { keys },
    scopes: scope.split(' '),
    features: {
        clientCredentials: { enabled: true },
        devInteractions: { enabled: false },
        introspection: { enabled: false },
        revocation: { enabled: false },
        resourceIndicators: {
            enabled: true,
            defaultResource: () => cfg.default_resource ?? undefined,
            useGrantedResource: () => true,
            getResourceServerInfo: () => ({
                scope, accessTokenFormat: 'jwt', accessTokenTTL: cfg.ttl ?? 300, jwt: { sign: { alg } }
            })
        }
    }
});
provider.on('server_error', (ctx, err) => process.stderr.write(`oidc server_error: ${err.stack}\n`));
server.on('request', provider.callback());

const pub = { keys: keys.map(({ d, p, q, dp, dq, qi, ...rest }) => rest) };
process.stdout.write(JSON.stringify({ port, issuer, jwks: pub, keys }) + '\n');
