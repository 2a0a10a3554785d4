/** One long-poll per page for every panel, the sidebar and the status bar. */
import { ISignal, Signal } from '@lumino/signaling';

import { fetchJob, fetchSessions } from './api';
import { ISession, ISnapshot } from './types';

const WAIT_SECONDS = 20;
const RETRY_MS = 2000;
const TICK_MS = 5000; // idle times and the idle-stop countdown move on between changes

export class SessionsModel {
  private _snapshot: ISnapshot | null = null;
  private _changed = new Signal<this, void>(this);
  private _jobs = new Map<string, ISession>();
  private _asked = new Set<string>();
  private _running = false;
  error = '';

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get sessions(): ISession[] {
    return this._snapshot?.sessions ?? [];
  }

  start(): void {
    if (this._running) {
      return;
    }
    this._running = true;
    void this._loop();
    window.setInterval(() => this._changed.emit(), TICK_MS);
  }

  private async _loop(): Promise<void> {
    let since: number | null = null;
    while (this._running) {
      try {
        const snap = await fetchSessions(since, WAIT_SECONDS);
        const readAt = Date.now();
        snap.sessions.forEach(s => (s.readAt = readAt));
        const changed = since === null || snap.version !== since;
        since = snap.version;
        this._snapshot = snap;
        this.error = '';
        if (changed) {
          this._jobs.clear();
          this._asked.clear();
        }
        this._changed.emit();
      } catch (err) {
        this.error = err instanceof Error ? err.message : String(err);
        this._changed.emit();
        await new Promise(resolve => window.setTimeout(resolve, RETRY_MS));
        since = null;
      }
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
    if (!this._asked.has(key)) {
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
