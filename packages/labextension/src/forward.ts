/** The ended form of a forward panel: a forward lives in its kernel, so once its TrainJob is
 * gone or ended (kernel restarted, session closed) the port is closed, though the kernel's last
 * drawing, which it can no longer change, still says "Forwarding" with a live link and IFrame. */
import { IPanelRef, ISession } from './types';

/** Why the forward of ``ref`` is closed, or '' while it may still be forwarding. */
export function forwardClosed(ref: IPanelRef, job: ISession | null): string {
  if (ref.kind !== 'forward' || !ref.forwarding || !job) {
    return '';
  }
  if (job.gone) {
    return job.gone.reason;
  }
  if (['Complete', 'Failed', 'Deleting'].includes(job.state)) {
    return `the TrainJob is ${job.state}`;
  }
  return '';
}

/** The static form: the state, the link as text (no anchor, no IFrame), where it went; why it
 * ended is the live line's (above), and the tooltip's. */
export function renderForwardEnded(node: HTMLElement, ref: IPanelRef, why: string): void {
  const panel = document.createElement('div');
  panel.className = 'trainjob-forward trainjob-forward-panel tjm-forward-ended';
  const state = document.createElement('span');
  state.className = 'tjm-state';
  state.dataset.state = 'Stopped';
  state.textContent = 'Stopped (session ended)';
  const link = document.createElement('span');
  link.className = 'tjm-forward-link';
  link.textContent = ref.link ?? '';
  const pod = ref.pod ? ` of pod ${ref.pod}` : '';
  const alias = ref.alias ? ` (session '${ref.alias}')` : '';
  const where = document.createElement('span');
  where.className = 'tjm-forward-where';
  where.textContent = `→ port ${ref.port ?? '?'}${pod}${alias}`;
  panel.title = `The forward closed with its session: ${why}.`;
  panel.append(state, ' ', link, ' ', where);
  node.replaceChildren(panel);
}
