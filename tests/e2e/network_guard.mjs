// Loaded into a client's node process (NODE_OPTIONS=--import=...) by tests
// that must stay on this machine: any connection or name lookup for a host
// other than the loopback fails at once and is recorded, one line each, in
// the file $GRAFT_NETWORK_GUARD_LOG, which the test then checks is empty.
import { appendFileSync } from 'node:fs';
import dns from 'node:dns';
import net from 'node:net';

const LOG = process.env.GRAFT_NETWORK_GUARD_LOG;
const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1']);

function refuse(what) {
  if (LOG) appendFileSync(LOG, `${what}\n`);
  return new Error(`network_guard: ${what} is off limits in this test`);
}

const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guardedConnect(...args) {
  const options = typeof args[0] === 'object' && args[0] !== null ? (Array.isArray(args[0]) ? args[0][0] : args[0]) : null;
  const host = options ? options.host ?? (options.path ? null : 'localhost') : typeof args[1] === 'string' ? args[1] : typeof args[0] === 'string' ? null : 'localhost';
  if (host !== null && !LOOPBACK.has(host)) {
    const error = refuse(`connect to ${host}:${options?.port ?? args[0]}`);
    process.nextTick(() => this.destroy(error));
    return this;
  }
  return connect.apply(this, args);
};

for (const name of ['lookup', 'resolve', 'resolve4', 'resolve6']) {
  const original = dns[name];
  dns[name] = function guardedLookup(host, ...rest) {
    if (!LOOPBACK.has(host)) {
      const callback = rest.findLast((r) => typeof r === 'function');
      const error = refuse(`dns ${name} ${host}`);
      if (callback) process.nextTick(() => callback(error));
      return undefined;
    }
    return original.call(this, host, ...rest);
  };
}
for (const name of ['lookup', 'resolve', 'resolve4', 'resolve6']) {
  const original = dns.promises[name];
  dns.promises[name] = async function guardedLookup(host, ...rest) {
    if (!LOOPBACK.has(host)) throw refuse(`dns ${name} ${host}`);
    return original.call(this, host, ...rest);
  };
}
