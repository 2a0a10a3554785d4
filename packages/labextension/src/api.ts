/** Requests to the server extension, through Jupyter's own connection (auth and XSRF). */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IGpuReport, IMessage, ISession, ISnapshot } from './types';

export const API_ROOT = 'trainjob-magics/api';

async function call<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, API_ROOT, path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const data: unknown = text ? JSON.parse(text) : {};
  if (!response.ok) {
    const message = (data as Partial<IMessage>).message ?? response.statusText;
    throw new Error(message);
  }
  return data as T;
}

/** The sessions' snapshot: at once without ``since``, else after version ``since`` (the server
 * holds the request up to ``wait`` seconds while nothing changes). ``signal`` aborts it. */
export function fetchSessions(
  since: number | null,
  wait: number,
  signal?: AbortSignal
): Promise<ISnapshot> {
  const query = since === null ? '' : `?since=${since}&wait=${wait}`;
  return call<ISnapshot>(`sessions${query}`, signal ? { signal } : {});
}

export function fetchJob(namespace: string, name: string, uid: string): Promise<ISession> {
  const query = uid ? `?uid=${encodeURIComponent(uid)}` : '';
  return call<ISession>(
    `sessions/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}${query}`
  );
}

/** The job's GPUs (the server execs in each pod at most every 10 s, whoever asks). */
export function fetchGpus(namespace: string, name: string, uid: string): Promise<IGpuReport> {
  const query = uid ? `?uid=${encodeURIComponent(uid)}` : '';
  return call<IGpuReport>(
    `sessions/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/gpus${query}`
  );
}

export async function closeJob(namespace: string, name: string): Promise<string> {
  const data = await call<IMessage>(
    `sessions/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/close`,
    { method: 'POST' }
  );
  return data.message;
}
