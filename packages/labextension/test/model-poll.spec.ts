/** The model's long-poll on Lumino's Poll: the snapshots it delivers, its backoff after failed
 * requests, standby while the page is hidden, and nothing left running once disposed. Fake
 * timers: every pause is the model's own, moved on by the test, never waited out. */
import { fetchSessions } from '../src/api';
import {
  POLL_INTERVAL_MS,
  POLL_MAX_MS,
  SessionsModel,
  TICK_MS,
  WAIT_SECONDS
} from '../src/model';
import { ISnapshot } from '../src/types';

jest.mock('../src/api');

const mockedSessions = fetchSessions as jest.MockedFunction<typeof fetchSessions>;

function snapshot(version: number): ISnapshot {
  return { version, sessions: [], gone: [], problems: [], namespaces: ['ns'], user: 'me' };
}

/** A long-poll answered by the test: ``answer`` resolves it, ``fail`` rejects it. */
interface IPending {
  since: number | null;
  signal: AbortSignal | undefined;
  answer: (snap: ISnapshot) => void;
  fail: (err: Error) => void;
}

/** Every request the model makes, held open until the test answers it. */
function holdRequests(): IPending[] {
  const pending: IPending[] = [];
  mockedSessions.mockImplementation(
    (since, _wait, signal) =>
      new Promise<ISnapshot>((resolve, reject) => {
        pending.push({ since, signal, answer: resolve, fail: reject });
      })
  );
  return pending;
}

/** Move the fake clock on by ``ms``, running what falls due (promises settled in between). */
async function advance(ms: number): Promise<void> {
  await jest.advanceTimersByTimeAsync(ms);
}

function setHidden(hidden: boolean): void {
  Object.defineProperty(document, 'visibilityState', {
    configurable: true,
    get: () => (hidden ? 'hidden' : 'visible')
  });
  Object.defineProperty(document, 'hidden', { configurable: true, get: () => hidden });
  document.dispatchEvent(new Event('visibilitychange'));
}

let model: SessionsModel;

beforeEach(() => {
  jest.useFakeTimers();
  mockedSessions.mockReset();
  setHidden(false);
});

afterEach(() => {
  model?.dispose();
  jest.restoreAllMocks();
  jest.useRealTimers();
  setHidden(false);
});

describe('the long-poll', () => {
  it('delivers each new snapshot, asking for what comes after the version it holds', async () => {
    const pending = holdRequests();
    model = new SessionsModel();
    const seen: number[] = [];
    model.changed.connect(() => {
      if (model.snapshot && seen[seen.length - 1] !== model.snapshot.version) {
        seen.push(model.snapshot.version);
      }
    });
    model.start();
    await advance(0);
    expect(mockedSessions).toHaveBeenCalledTimes(1);
    expect(mockedSessions.mock.calls[0]?.slice(0, 2)).toEqual([null, WAIT_SECONDS]);

    for (const version of [1, 2, 3]) {
      pending[pending.length - 1]?.answer(snapshot(version));
      await advance(POLL_INTERVAL_MS);
      expect(model.snapshot?.version).toBe(version);
      // the next request is a long-poll after the version just read
      expect(mockedSessions.mock.calls[mockedSessions.mock.calls.length - 1]?.slice(0, 2)).toEqual(
        [version, WAIT_SECONDS]
      );
    }
    expect(seen).toEqual([1, 2, 3]);
    expect(mockedSessions).toHaveBeenCalledTimes(4);
    expect(model.error).toBe('');
  });

  it('asks for a whole snapshot again after a failed request, and clears the error', async () => {
    const pending = holdRequests();
    model = new SessionsModel();
    model.start();
    await advance(0);
    pending[0]?.answer(snapshot(7));
    await advance(POLL_INTERVAL_MS);
    pending[1]?.fail(new Error('server gone'));
    await advance(0);
    expect(model.error).toBe('server gone');
    await advance(POLL_MAX_MS);
    expect(mockedSessions.mock.calls[2]?.[0]).toBeNull();
    pending[2]?.answer(snapshot(9));
    await advance(0);
    expect(model.error).toBe('');
    expect(model.snapshot?.version).toBe(9);
  });
});

describe('after failed requests', () => {
  it('waits longer after each failure, up to the maximum, then the base pause once one succeeds', async () => {
    // the backoff's random pick, pinned: the longest pause each time
    jest.spyOn(Math, 'random').mockReturnValue(1 - 1e-9);
    const times: number[] = [];
    mockedSessions
      .mockImplementation(() => {
        times.push(Date.now());
        return Promise.reject(new Error('503 Service Unavailable'));
      })
      .mockImplementationOnce(() => {
        times.push(Date.now()); // one answer first: the failures start from the base pause
        return Promise.resolve(snapshot(1));
      });
    model = new SessionsModel();
    model.start();
    await advance(10 * 60 * 1000);

    const gaps = times.slice(1).map((t, i) => t - (times[i] ?? t));
    expect(gaps[0]).toBe(POLL_INTERVAL_MS); // the answer, then the base pause
    const afterFailures = gaps.slice(1);
    // each failure: a longer pause than the one before (3x), until the maximum
    expect(afterFailures.slice(0, 4)).toEqual([
      3 * POLL_INTERVAL_MS,
      9 * POLL_INTERVAL_MS,
      27 * POLL_INTERVAL_MS,
      POLL_MAX_MS
    ]);
    expect(new Set(afterFailures.slice(3))).toEqual(new Set([POLL_MAX_MS]));
    // far fewer requests in ten minutes than a fixed retry every 2 s would make (300)
    expect(times.length).toBeLessThan(30);
    expect(model.error).toBe('503 Service Unavailable');

    // the server back: the next answer clears the error, and the pause is the base one again
    let answered = 0;
    mockedSessions.mockImplementation(() => {
      answered += 1;
      return Promise.resolve(snapshot(10 + answered));
    });
    await advance(POLL_MAX_MS);
    expect(answered).toBeGreaterThan(0);
    expect(model.error).toBe('');
    const before = answered;
    await advance(10 * POLL_INTERVAL_MS);
    expect(answered - before).toBe(10);
  });
});

describe('while the page is hidden', () => {
  it('stands by: no requests and no ticks until the page is shown again', async () => {
    let served = 0;
    mockedSessions.mockImplementation(() => {
      served += 1;
      return Promise.resolve(snapshot(served));
    });
    model = new SessionsModel();
    let changes = 0;
    model.changed.connect(() => (changes += 1));
    model.start();
    await advance(10 * POLL_INTERVAL_MS);
    expect(served).toBeGreaterThanOrEqual(9);

    setHidden(true);
    await advance(2 * TICK_MS); // each poll lingers one tick before it stands by
    const hiddenAt = served;
    const changesAt = changes;
    await advance(10 * 60 * 1000);
    expect(served).toBe(hiddenAt);
    expect(changes).toBe(changesAt); // the idle-time tick stands by too

    setHidden(false);
    await advance(2 * POLL_INTERVAL_MS);
    expect(served).toBeGreaterThan(hiddenAt);
    await advance(TICK_MS);
    expect(changes).toBeGreaterThan(changesAt);
  });
});

describe('once disposed', () => {
  it('makes no request, ticks no more, aborts the long-poll in flight and leaves no timer', async () => {
    const pending = holdRequests();
    model = new SessionsModel();
    let changes = 0;
    model.changed.connect(() => (changes += 1));
    model.start();
    await advance(0);
    pending[0]?.answer(snapshot(1));
    await advance(POLL_INTERVAL_MS);
    expect(mockedSessions).toHaveBeenCalledTimes(2);
    const inFlight = pending[1];
    expect(inFlight?.signal?.aborted).toBe(false);

    model.dispose();
    expect(model.isDisposed).toBe(true);
    expect(inFlight?.signal?.aborted).toBe(true);
    const changesAt = changes;
    inFlight?.answer(snapshot(2)); // an answer that arrives anyway is dropped
    await advance(10 * 60 * 1000);
    expect(mockedSessions).toHaveBeenCalledTimes(2);
    expect(changes).toBe(changesAt);
    expect(model.snapshot?.version).toBe(1);
    expect(jest.getTimerCount()).toBe(0);
    model.start(); // a disposed model does not start again
    await advance(10 * 60 * 1000);
    expect(mockedSessions).toHaveBeenCalledTimes(2);
  });
});
