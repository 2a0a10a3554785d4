/** The live part of a panel: one line of the job's real state above the kernel's last drawing. */
import { durationWords, holdsText, idleWarning, stateLine } from './format';
import { IPanelRef, ISession } from './types';

/** What the live line says for a panel of ``ref`` given the job's record (or none yet). */
export function liveLine(ref: IPanelRef, job: ISession | null): string {
  const what = ref.kind === 'forward' && ref.port ? `forward of port ${ref.port} · ` : '';
  if (!job) {
    return `${what}TrainJob ${ref.name}: reading its state…`;
  }
  if (ref.kind === 'cell') {
    // the output below stays true; only the job it ran in moves on
    return `ran in TrainJob ${ref.name} · now ${stateLine(job)}`;
  }
  const parts = [`${what}TrainJob ${ref.name}: ${stateLine(job)}`];
  if (job.gone && ref.kind === 'forward') {
    parts.push('the forward is closed');
  }
  if (showsHolds(ref, job)) {
    parts.push(holdsText(job));
  }
  return parts.join(' · ');
}

/** Whether the live line says what the job holds: then the holding line the kernel drew
 * under its status panel (``.tjm-holds``, ``%trainjob_status``) is hidden, said once. */
export function showsHolds(ref: IPanelRef, job: ISession | null): boolean {
  return ref.kind !== 'cell' && !!job && !!job.holds && !job.gone;
}

/** Whether the kernel's drawing below is out of date (the job is gone or ended); a cell's
 * output never is. */
export function isStale(job: ISession | null, ref?: IPanelRef): boolean {
  if (ref?.kind === 'cell') {
    return false;
  }
  return !!job && (!!job.gone || ['Complete', 'Failed', 'Deleting'].includes(job.state));
}

export function renderLive(node: HTMLElement, ref: IPanelRef, job: ISession | null): void {
  node.textContent = liveLine(ref, job);
  node.dataset.state = job ? (job.gone ? 'Gone' : job.state) : 'Reading';
  node.dataset.kind = ref.kind;
  const warning = job ? idleWarning(job) : '';
  if (warning) {
    const span = document.createElement('span');
    span.className = 'tjm-idle-warning';
    span.textContent = ` ⚠ ${warning}`;
    node.appendChild(span);
  }
  node.title = job?.lastCommand
    ? `last command ${durationWords((Date.now() - Date.parse(job.lastCommand)) / 1000)} ago`
    : '';
}
