import { ServiceDeadlineError, ServiceDownError, ServiceGate, sharedServiceGate } from '../../lib/core/service-gate';
import type { ServiceClient } from '../../lib/stores/types';

/** A call that answers (or fails) when the test says. */
function held<T>() {
  let answer!: (value: T) => void;
  let fail!: (err: unknown) => void;
  const promise = new Promise<T>((resolve, reject) => {
    answer = resolve;
    fail = reject;
  });
  return { promise, answer, fail };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

/** A client that tells nothing beyond what a test gives it: no connection events, its timeouts as ioredis words them. */
const client: ServiceClient = {
  oneConnection: true,
  onConnect: () => undefined,
  connected: () => true,
  isReply: (err) => (err as Error).name === 'ReplyError',
  isClientTimeout: (err) => (err as Error).message === 'Command timed out',
};

describe('ServiceGate', () => {
  it('a call past the deadline takes the service down for every caller: those waiting are let go at once, later ones are not sent', async () => {
    // the gate's clock held still: the second call's failure, however late the timers run, comes before its deadline
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 50, now: () => 1_000_000 });
    const changes: string[] = [];
    gate.watch({ down: (reason) => changes.push(`down: ${reason}`), up: () => changes.push('up') });
    const first = held<string>();
    const firstCall = gate.run(() => first.promise);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const second = held<string>();
    const secondCall = gate.run(() => second.promise);
    await expect(firstCall).rejects.toBeInstanceOf(ServiceDeadlineError);
    // let go with the first (its own deadline, later, would be a ServiceDeadlineError)
    await expect(secondCall).rejects.toBeInstanceOf(ServiceDownError);
    expect(gate.up).toBe(false);
    expect(changes).toEqual(['down: Redis did not answer within 50 ms']);

    let sent = 0;
    await expect(gate.run(async () => (sent++, 'x'))).rejects.toThrow(/^Redis is not answering \(since .*: Redis did not answer within 50 ms\); not asked$/);
    // otherwise: the answer instead, at once
    await expect(gate.run(async () => (sent++, 'x'), { otherwise: (why) => `memory (${why.name})` })).resolves.toBe('memory (ServiceDownError)');
    expect(sent).toBe(0);
    expect(gate.unsettled).toBe(2);

    // what it held comes back (answered late): no proof of now, since both began before the outage was seen
    first.answer('late');
    second.fail(new Error('Connection is closed.'));
    await settle();
    expect([gate.unsettled, gate.up]).toEqual([0, false]);
    // nothing held: the next call is sent, and its answer ends the outage
    await expect(gate.run(async () => (sent++, 'fresh'))).resolves.toBe('fresh');
    expect([sent, gate.up]).toEqual([1, true]);
    expect(changes).toEqual(['down: Redis did not answer within 50 ms', 'up']);
  });

  it('an answer past its deadline, to a call begun in the outage, does not end it; it frees the connection, and a timely answer ends it', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 30 });
    const changes: string[] = [];
    gate.watch({ down: () => changes.push('down'), up: () => changes.push('up') });
    await expect(gate.run(() => new Promise<string>((resolve) => setTimeout(() => resolve('late'), 45)))).rejects.toBeInstanceOf(ServiceDeadlineError);
    await new Promise((resolve) => setTimeout(resolve, 30)); // the first answer came, late
    // sent in the outage (nothing held), answered 15 ms past its deadline
    const slow = held<string>();
    const call = gate.run(() => slow.promise);
    await expect(call).rejects.toBeInstanceOf(ServiceDeadlineError);
    slow.answer('late');
    await settle();
    expect([gate.up, gate.unsettled, gate.mayCall()]).toEqual([false, 0, true]);
    await expect(gate.run(async () => 'in time')).resolves.toBe('in time');
    expect(changes).toEqual(['down', 'up']);
  });

  it('a service that fails fast is asked by every call while down (each fails at once); a rejection that is an answer is one', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
    let down = true;
    let sent = 0;
    const call = async () => {
      sent++;
      if (down) throw new Error('connect ECONNREFUSED');
      return 'OK';
    };
    for (let i = 0; i < 3; i++) await expect(gate.run(call)).rejects.toThrow('ECONNREFUSED');
    expect([sent, gate.up]).toEqual([3, false]);
    await expect(gate.run(call, { otherwise: () => 'memory' })).resolves.toBe('memory');
    down = false;
    await expect(gate.run(call)).resolves.toBe('OK');
    expect(gate.up).toBe(true);

    // rate-limiter-flexible's "over the limit" rejects with a result, not an Error
    const overLimit = { consumedPoints: 11 };
    await expect(gate.run(() => Promise.reject(overLimit), { isAnswer: (r) => !(r instanceof Error) })).rejects.toBe(overLimit);
    expect(gate.up).toBe(true);
  });

  it('an error reply of one call (isCallError) gets otherwise, and takes the service neither down nor back', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
    const noScript = Object.assign(new Error('NOPERM this user has no permissions to run the eval command'), { name: 'ReplyError' });
    const isCallError = (err: unknown) => (err as Error).name === 'ReplyError';
    await expect(gate.run(() => Promise.reject(noScript), { isCallError, otherwise: () => 'memory' })).resolves.toBe('memory');
    expect(gate.up).toBe(true);
    await expect(gate.run(() => Promise.reject(new Error('connect ECONNREFUSED')))).rejects.toThrow('ECONNREFUSED');
    await expect(gate.run(() => Promise.reject(noScript), { isCallError })).rejects.toBe(noScript);
    expect(gate.up).toBe(false);
  });

  it('while down, calls are held back as long as one sent is unanswered, for abandonAfterMs at most: then one more is sent', async () => {
    let now = 1_000_000;
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 20, abandonAfterMs: 30_000, now: () => now });
    const never = () => new Promise<string>(() => undefined);
    await expect(gate.run(never)).rejects.toBeInstanceOf(ServiceDeadlineError);
    let sent = 0;
    const counted = () => {
      sent++;
      return never();
    };
    now += 29_999;
    await expect(gate.run(counted)).rejects.toBeInstanceOf(ServiceDownError);
    now += 1;
    await expect(gate.run(counted)).rejects.toBeInstanceOf(ServiceDeadlineError);
    expect(sent).toBe(1);
    // and the next one after another 30 s without an answer
    now += 10_000;
    await expect(gate.run(counted)).rejects.toBeInstanceOf(ServiceDownError);
    expect([sent, gate.unsettled]).toEqual([1, 2]);
  });

  it('what a call still holds counts for its outage only: once the service is up again, a call it never settled holds up nothing', async () => {
    let now = 1_000_000;
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 20, now: () => now });
    // dropped by the client: never answered, never rejected
    await expect(gate.run(() => new Promise<string>(() => undefined))).rejects.toBeInstanceOf(ServiceDeadlineError);
    now += 30_000;
    await expect(gate.run(async () => 'back')).resolves.toBe('back');
    expect([gate.up, gate.unsettled]).toEqual([true, 0]);
    // the next outage: a service that fails fast is asked by the next call at once
    await expect(gate.run(() => Promise.reject(new Error('connect ECONNREFUSED')))).rejects.toThrow('ECONNREFUSED');
    let sent = 0;
    await expect(gate.run(async () => (sent++, 'again'))).resolves.toBe('again');
    expect([sent, gate.up]).toEqual([1, true]);
  });

  it("the client's new connection ends the wait for what it held on the one before (resent, or dropped for good)", async () => {
    const connected: Array<() => void> = [];
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 20, client: { ...client, onConnect: (listener) => void connected.push(listener) } });
    expect(connected).toHaveLength(1);
    await expect(gate.run(() => new Promise<string>(() => undefined))).rejects.toBeInstanceOf(ServiceDeadlineError);
    let sent = 0;
    await expect(gate.run(async () => (sent++, 'x'))).rejects.toBeInstanceOf(ServiceDownError);
    expect([sent, gate.unsettled, gate.mayCall()]).toEqual([0, 1, false]);
    connected[0]();
    expect([gate.unsettled, gate.mayCall()]).toEqual([0, true]);
    await expect(gate.run(async () => (sent++, 'x'))).resolves.toBe('x');
    expect([sent, gate.up]).toEqual([1, true]);
  });

  it("while down, a call the client gave up on itself (its timeout) or that failed past the deadline is taken as still held: the next one waits retryAfterGiveUpMs, not one per call", async () => {
    let now = 1_000_000;
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000, retryAfterGiveUpMs: 5000, client, now: () => now });
    let sent = 0;
    const timedOut = () => (sent++, Promise.reject(new Error('Command timed out')));
    await expect(gate.run(timedOut)).rejects.toThrow('Command timed out');
    expect([gate.up, gate.unsettled]).toEqual([false, 0]);
    for (let i = 0; i < 5; i++) await expect(gate.run(timedOut)).rejects.toBeInstanceOf(ServiceDownError);
    expect(sent).toBe(1);
    now += 5000;
    await expect(gate.run(timedOut)).rejects.toThrow('Command timed out');
    await expect(gate.run(timedOut)).rejects.toBeInstanceOf(ServiceDownError);
    expect(sent).toBe(2);

    // a failure at the deadline that is no reply: the same; a reply, or a failure before the deadline: the next call at once
    now += 5000;
    const late = held<string>();
    const call = gate.run(() => (sent++, late.promise));
    now += 1000;
    late.fail(new Error('socket hang up'));
    await expect(call).rejects.toThrow('socket hang up');
    expect(gate.mayCall()).toBe(false);
    now += 5000;
    await expect(gate.run(() => (sent++, Promise.reject(Object.assign(new Error('READONLY'), { name: 'ReplyError' }))))).rejects.toThrow('READONLY');
    expect(gate.mayCall()).toBe(true);
    await expect(gate.run(() => (sent++, Promise.reject(new Error('connect ECONNREFUSED'))))).rejects.toThrow('ECONNREFUSED');
    expect(gate.mayCall()).toBe(true);
    expect(sent).toBe(5);
  });

  it('while down, nothing is sent while the client is not connected (it would wait in its queue); its connection made, the next call is', async () => {
    let connected = false;
    const onConnect: Array<() => void> = [];
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000, client: { ...client, connected: () => connected, onConnect: (l) => void onConnect.push(l) } });
    let sent = 0;
    const refused = () => (sent++, Promise.reject(new Error('Reached the max retries per request limit (which is 20)')));
    // up: sent whatever the client says (at start it is still connecting; its queue holds the call for a moment)
    await expect(gate.run(refused)).rejects.toThrow('max retries');
    for (let i = 0; i < 3; i++) await expect(gate.run(refused)).rejects.toBeInstanceOf(ServiceDownError);
    expect(sent).toBe(1);
    connected = true;
    onConnect.forEach((l) => l());
    await expect(gate.run(async () => (sent++, 'OK'))).resolves.toBe('OK');
    expect([sent, gate.up]).toEqual([2, true]);
  });

  it('a connected client whose calls go unanswered for reconnectAfterMs is made to connect again, once a period; its new connection frees the calls', async () => {
    let clock = 1_000_000;
    const onConnect: Array<() => void> = [];
    let reconnects = 0;
    let connected = true;
    const gate = new ServiceGate({
      name: 'Redis',
      deadlineMs: 50,
      reconnectAfterMs: 10_000,
      now: () => clock,
      client: { ...client, connected: () => connected, onConnect: (l) => void onConnect.push(l), reconnect: () => void (reconnects++, (connected = false)) },
    });
    // a dead connection: the call is never answered, and the next ones are held back behind it
    await expect(gate.run(() => new Promise<string>(() => undefined))).rejects.toBeInstanceOf(ServiceDeadlineError);
    clock += 9_999;
    expect(gate.mayCall()).toBe(false);
    expect(reconnects).toBe(0);
    clock += 1;
    expect(gate.mayCall()).toBe(false);
    expect(reconnects).toBe(1);
    // reconnecting: not connected, nothing sent, no second reconnect
    expect(gate.mayCall()).toBe(false);
    expect(reconnects).toBe(1);
    // the new connection: what the old one held is dropped, the next call goes and its answer ends the outage
    connected = true;
    onConnect.forEach((l) => l());
    await expect(gate.run(async () => 'PONG')).resolves.toBe('PONG');
    expect([gate.up, reconnects]).toEqual([true, 1]);
  });

  it('without reconnect() (a client that cannot), a call held that long only lets one more through after abandonAfterMs', async () => {
    let clock = 1_000_000;
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 50, reconnectAfterMs: 10_000, abandonAfterMs: 30_000, now: () => clock, client });
    await expect(gate.run(() => new Promise<string>(() => undefined))).rejects.toBeInstanceOf(ServiceDeadlineError);
    clock += 10_000;
    expect(gate.mayCall()).toBe(false);
    clock += 20_000;
    expect(gate.mayCall()).toBe(true);
  });

  it('a client over many connections (a Cluster) is never held back: each call has its own deadline, and one stalled does not let go of the others', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 100, client: { ...client, oneConnection: false } });
    // a stalled shard: its call misses the deadline, while one to another shard, sent later, waits
    const stalled = gate.run(() => new Promise<string>(() => undefined));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const healthyShard = held<string>();
    const waiting = gate.run(() => healthyShard.promise);
    await expect(stalled).rejects.toBeInstanceOf(ServiceDeadlineError);
    expect(gate.up).toBe(false);
    healthyShard.answer('from the other shard');
    await expect(waiting).resolves.toBe('from the other shard');
    // later calls are sent, each waiting its own deadline at most
    let sent = 0;
    await expect(gate.run(() => (sent++, new Promise<string>(() => undefined)))).rejects.toBeInstanceOf(ServiceDeadlineError);
    await expect(gate.run(async () => (sent++, 'answered'))).resolves.toBe('answered');
    expect([sent, gate.up]).toEqual([2, true]);
  });

  it('one gate per client object in a process', () => {
    const client = {};
    const options = { name: 'Redis', deadlineMs: 1000 };
    expect(sharedServiceGate(client, options)).toBe(sharedServiceGate(client, options));
    expect(sharedServiceGate({}, options)).not.toBe(sharedServiceGate(client, options));
    // the defaults are the settings asked for when left out
    expect(sharedServiceGate(client, { ...options, abandonAfterMs: 30_000, retryAfterGiveUpMs: 5000 })).toBe(sharedServiceGate(client, options));
  });

  it('one set of settings per client: a part asking for another deadline is told at once, not given the first one quietly', () => {
    const client = {};
    sharedServiceGate(client, { name: 'Redis', deadlineMs: 1000 });
    expect(() => sharedServiceGate(client, { name: 'Redis', deadlineMs: 2000 })).toThrow(
      new TypeError('the gate of this Redis client has deadlineMs 1000; another part on the client asked for 2000 (one set of settings per client)'),
    );
    expect(() => sharedServiceGate(client, { name: 'Redis', deadlineMs: 1000, abandonAfterMs: 10_000 })).toThrow(/has abandonAfterMs 30000; .* asked for 10000/);
    expect(sharedServiceGate(client, { name: 'Redis', deadlineMs: 1000 }).deadlineMs).toBe(1000);
  });
});
