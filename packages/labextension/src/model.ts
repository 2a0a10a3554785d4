/** One long-poll per page for every panel, the sidebar and the status bar, on Lumino's `Poll`
 * (as jupyter-resource-usage and jupyterlab-git poll): backoff after a failed request, standby
 * while the page is hidden, nothing left running once the model is disposed. */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { fetchJob, fetchSessions } from './api';
import { ISession, ISnapshot } from './types';

/** How long the server holds a long-poll open when nothing changes (seconds). */
export const WAIT_SECONDS = 20;
/** The pause between an answer and the next long-poll (a change in it is answered at once). */
export const POLL_INTERVAL_MS = 500;
/** The longest pause after failed requests (the pause grows 3x per failure up to this). */
export const POLL_MAX_MS = 30_000;
/** Idle times and the idle-stop countdown move on between changes: ``changed`` this often. */
export const TICK_MS = 5000;

export class SessionsModel implements IDisposable {
  private _snapshot: ISnapshot | null = null;
  private _changed = new Signal<this, void>(this);
  private _jobs = new Map<string, ISession>();
  private _asked = new Set<string>();
  private _since: number | null = null;
  private _aborts = new Set<AbortController>();
  private _disposed = false;
  private _poll: Poll<ISnapshot, unknown>;
  private _tick: Poll<void, unknown>;
  error = '';

  constructor() {
    this._poll = new Poll<ISnapshot, unknown>({
      auto: false,
      factory: (): Promise<ISnapshot> => this._read(),
      frequency: { interval: POLL_INTERVAL_MS, backoff: true, max: POLL_MAX_MS },
      name: 'trainjob-magics:sessions',
      standby: 'when-hidden'
    });
    this._tick = new Poll<void, unknown>({
      auto: false,
      factory: (): Promise<void> => {
        this._changed.emit();
        return Promise.resolve();
      },
      frequency: { interval: TICK_MS, backoff: false },
      name: 'trainjob-magics:tick',
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get sessions(): ISession[] {
    return this._snapshot?.sessions ?? [];
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Start the long-poll and the tick (idempotent: a running poll is not restarted). */
  start(): void {
    if (this._disposed) {
      return;
    }
    void this._poll.start();
    void this._tick.schedule({
      cancel: ({ phase }) => phase !== 'constructed',
      interval: TICK_MS,
      phase: 'started'
    });
  }

  /** Stop polling and ticking, abort the request in flight, disconnect every listener. */
  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poll.dispose();
    this._tick.dispose();
    this._aborts.forEach(a => a.abort());
    this._aborts.clear();
    Signal.clearData(this);
  }

  /** One long-poll: the snapshot after ``since`` (at once when there is none yet). A failure
   * is shown (``error``) and rethrown, so that the poll backs off; the next request after it
   * asks for a whole snapshot. */
  private async _read(): Promise<ISnapshot> {
    const abort = new AbortController();
    this._aborts.add(abort);
    try {
      const since = this._since;
      const snap = await fetchSessions(since, WAIT_SECONDS, abort.signal);
      if (this._disposed) {
        return snap;
      }
      const readAt = Date.now();
      snap.sessions.forEach(s => (s.readAt = readAt));
      const changed = since === null || snap.version !== since;
      this._since = snap.version;
      this._snapshot = snap;
      this.error = '';
      if (changed) {
        this._jobs.clear();
        this._asked.clear();
      }
      this._changed.emit();
      return snap;
    } catch (err) {
      if (!this._disposed) {
        this._since = null;
        this.error = err instanceof Error ? err.message : String(err);
        this._changed.emit();
      }
      throw err;
    } finally {
      this._aborts.delete(abort);
    }
  }

  /** A panel's job: from the snapshot, else asked once per change (gone, other users, ...). */
  find(namespace: string, name: string, uid: string): ISession | null {
    const match = (s: ISession): boolean =>
      s.name === name && s.namespace === namespace && (!uid || !s.uid || s.uid === uid);
    const live = this.sessions.find(match);
    if (live) {
      return live;
    }
    const gone = (this._snapshot?.gone ?? []).find(
      s => match(s) && (!uid || s.uid === uid)
    );
    if (gone) {
      return gone;
    }
    const key = `${namespace}/${name}/${uid}`;
    const known = this._jobs.get(key);
    if (!this._asked.has(key) && !this._disposed) {
      this._asked.add(key);
      fetchJob(namespace, name, uid)
        .then(job => {
          this._jobs.set(key, { ...job, readAt: Date.now() });
          this._changed.emit();
        })
        .catch(() => {
          this._asked.delete(key);
        });
    }
    return known ?? null;
  }
}

let shared: SessionsModel | null = null;

/** The page's one model (the MIME renderer and the plugins share it). */
export function sharedModel(): SessionsModel {
  if (!shared) {
    shared = new SessionsModel();
    shared.start();
  }
  return shared;
}
