import {
  durationWords,
  forwardWords,
  groupByKernel,
  holdsText,
  idleWarning,
  releaseWords,
  stateLine,
  totals,
  totalsLine
} from '../src/format';
import { isStale, liveLine } from '../src/panel';
import { IHolds, ISession } from '../src/types';

function session(over: Partial<ISession> = {}): ISession {
  return {
    name: 'a1b2c3d4e5f6',
    namespace: 'team',
    uid: 'u1',
    state: 'Running',
    pods: [{ name: 'p0', phase: 'Running', ready: true }],
    podsReady: '1/1',
    holds: {
      gpu: 8,
      cpu: 32,
      memoryBytes: 0,
      heldSeconds: 7800,
      gpuHours: 17.3,
      cpuHours: 69.3,
      idleSeconds: 2460,
      text: '8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h) · idle 41 min',
      heldText: '8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h)'
    },
    gone: null,
    ...over
  };
}

describe('idle time and release (issue 36)', () => {
  it('counts the idle time on with the idle-stop countdown', () => {
    const holds = {
      ...session().holds!,
      idleSeconds: 20,
      text: '8 GPU · held 1 min (0.1 GPU-h) · idle 20 s',
      heldText: '8 GPU · held 1 min (0.1 GPU-h)'
    };
    const s = session({ holds, idleStopIn: 20, idleWarning: true, readAt: 1_000_000 });
    const later = 1_000_000 + 17_000;
    expect(holdsText(s, later)).toBe('8 GPU · held 1 min (0.1 GPU-h) · idle 37 s');
    expect(idleWarning(s, later)).toBe('Idle stop in 3 s: run a command to keep it');
    // a server without heldText (before it was sent): its text as it is
    const old = { ...session().holds!, heldText: undefined } as unknown as IHolds;
    expect(holdsText(session({ holds: old }))).toBe(session().holds!.text);
  });

  it('says a forward by the pod port and the kernel local port', () => {
    expect(forwardWords({ localPort: 40123, port: 6006, pod: 'p0', link: 'http://x/' })).toBe(
      'port 6006 of pod p0 → local port 40123'
    );
  });

  it('says what a close releases, never the held time', () => {
    expect(releaseWords(session())).toBe('8 GPU and 32 CPU');
    const none = { ...session().holds!, gpu: 0, cpu: 0 };
    expect(releaseWords(session({ holds: none }))).toBe('its pods');
  });
});

describe('wording', () => {
  it('says durations as the magics do', () => {
    expect(durationWords(41)).toBe('41 s');
    expect(durationWords(41 * 60)).toBe('41 min');
    expect(durationWords(2 * 3600 + 600)).toBe('2 h 10 min');
    expect(durationWords(3 * 86400 + 4 * 3600)).toBe('3 d 4 h');
  });

  it('gives state, pods ready and queue position', () => {
    expect(stateLine(session())).toBe('Running · 1/1 pods ready');
    const queued = session({
      state: 'Suspended',
      pods: [],
      podsReady: '0/0',
      queue: { localQueue: 'team-q', state: 'Queued', position: 1 }
    });
    expect(stateLine(queued)).toBe('Suspended · position 2 in team-q');
  });

  it('says why a job is gone', () => {
    const gone = session({ state: 'Gone', gone: { reason: 'closed by the sidebar', at: null } });
    expect(stateLine(gone)).toBe('Gone: closed by the sidebar');
    expect(isStale(gone)).toBe(true);
    expect(isStale(session())).toBe(false);
    expect(liveLine({ kind: 'forward', name: gone.name, namespace: 'team', port: 6006 }, gone)).toBe(
      'forward of port 6006 · TrainJob a1b2c3d4e5f6: Gone: closed by the sidebar · the forward is closed'
    );
  });

  it('warns only within five minutes of an idle stop', () => {
    expect(idleWarning(session({ idleWarning: false, idleStopIn: 900 }))).toBe('');
    expect(idleWarning(session({ idleWarning: true, idleStopIn: 240 }))).toBe(
      'Idle stop in 4 min: run a command to keep it'
    );
  });

  it('counts the idle stop down from when the record was read', () => {
    const read = session({ idleWarning: true, idleStopIn: 45, readAt: 1_000_000 });
    expect(idleWarning(read, 1_000_000)).toBe('Idle stop in 45 s: run a command to keep it');
    expect(idleWarning(read, 1_030_000)).toBe('Idle stop in 15 s: run a command to keep it');
    expect(idleWarning(read, 1_090_000)).toBe('Idle stop in 0 s: run a command to keep it');
    // read 6 min before the stop: the warning starts a minute later, without a new read
    const early = session({ idleWarning: false, idleStopIn: 360, readAt: 0 });
    expect(idleWarning(early, 30_000)).toBe('');
    expect(idleWarning(early, 61_000)).toBe('Idle stop in 4 min: run a command to keep it');
  });

  it('adds up what the live sessions hold, not the gone ones', () => {
    const t = totals([session(), session({ gone: { reason: 'deleted', at: null } })]);
    expect(t).toEqual({ count: 1, gpu: 8, cpu: 32, gpuHours: 17.3 });
    expect(totalsLine(t)).toBe('1 TrainJob · 8 GPU · 32 CPU');
  });

  it('groups by notebook, orphans under "no kernel"', () => {
    const groups = groupByKernel([
      session({ name: 'a', kernel: 'k1', kernelAlive: true, notebook: 'train.ipynb' }),
      session({ name: 'b', kernel: 'k2', kernelAlive: false }),
      session({ name: 'c', kernel: 'k1', kernelAlive: true, notebook: 'train.ipynb' })
    ]);
    expect(groups.map(([key, list]) => [key, list.map(s => s.name)])).toEqual([
      ['train.ipynb', ['a', 'c']],
      ['no kernel', ['b']]
    ]);
  });
});
