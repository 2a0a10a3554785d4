/** The "TrainJob sessions" sidebar: every session of this user, grouped by notebook/kernel. */
import { Clipboard, Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { closeJob } from './api';
import {
  attachCommand,
  forwardWords,
  groupByKernel,
  holdsText,
  idleWarning,
  releaseWords,
  stateLine,
  totals,
  totalsLine
} from './format';
import { gpuSummary, sharedGpuReports, wantsGpus } from './gpus';
import { SessionsModel } from './model';
import { ISession } from './types';

export class SessionsSidebar extends Widget {
  private _model: SessionsModel;

  constructor(model: SessionsModel) {
    super();
    this._model = model;
    this.id = 'trainjob-magics-sessions';
    this.addClass('tjm-sidebar');
    this.title.caption = 'TrainJob sessions';
    model.changed.connect(this._render, this);
    sharedGpuReports().changed.connect(this._render, this);
    this._render();
  }

  protected onAfterShow(): void {
    this._render(); // opened: its jobs' GPUs are asked for at once
  }

  private _render(): void {
    const snap = this._model.snapshot;
    const node = this.node;
    node.replaceChildren();
    const head = document.createElement('h2');
    head.textContent = 'TrainJob sessions';
    node.appendChild(head);
    const sum = document.createElement('div');
    sum.className = 'tjm-sidebar-totals';
    sum.textContent = snap ? totalsLine(totals(snap.sessions)) : 'reading…';
    node.appendChild(sum);
    if (this._model.error) {
      node.appendChild(line('tjm-sidebar-problem', this._model.error));
    }
    for (const problem of snap?.problems ?? []) {
      node.appendChild(line('tjm-sidebar-problem', problem));
    }
    if (snap && !snap.sessions.length) {
      node.appendChild(line('tjm-sidebar-empty', `No sessions in ${snap.namespaces.join(', ')}`));
    }
    for (const [group, sessions] of groupByKernel(snap?.sessions ?? [])) {
      const section = document.createElement('section');
      section.className = 'tjm-sidebar-group';
      const title = document.createElement('h3');
      title.textContent = group;
      section.appendChild(title);
      for (const s of sessions) {
        section.appendChild(this._row(s));
      }
      node.appendChild(section);
    }
  }

  private _row(s: ISession): HTMLElement {
    const row = document.createElement('div');
    row.className = 'tjm-sidebar-session';
    row.dataset.name = s.name;
    row.dataset.state = s.state;
    row.appendChild(line('tjm-sidebar-name', `${s.name} · ${s.runtime ?? ''} · ${s.namespace}`));
    row.appendChild(line('tjm-sidebar-state', stateLine(s)));
    if (s.holds) {
      row.appendChild(line('tjm-sidebar-holds', holdsText(s)));
    }
    // GPUs: asked only while the sidebar is shown (at most every 10 s per job, shared)
    const gpus = sharedGpuReports();
    if (wantsGpus('sidebar', s, this.isVisible)) {
      gpus.ask(s.namespace, s.name, s.uid);
    }
    const report = wantsGpus('sidebar', s, true) ? gpus.latest(s.namespace, s.name, s.uid) : null;
    const used = gpuSummary(report);
    if (used) {
      row.appendChild(line('tjm-sidebar-gpus', used));
    }
    const warning = idleWarning(s);
    if (warning) {
      row.appendChild(line('tjm-idle-warning', `⚠ ${warning}`));
    }
    const buttons = document.createElement('div');
    buttons.className = 'tjm-sidebar-buttons';
    buttons.appendChild(button('Close', 'tjm-close', () => void this._close(s)));
    buttons.appendChild(
      button('Copy attach', 'tjm-copy', () => Clipboard.copyToSystem(attachCommand(s)))
    );
    row.appendChild(buttons);
    row.appendChild(forwardsList(s));
    return row;
  }

  private async _close(s: ISession): Promise<void> {
    const answer = await showDialog({
      title: `Close TrainJob ${s.name}?`,
      body: `This deletes the TrainJob and its pods in namespace ${
        s.namespace
      }, releasing ${releaseWords(s)}. A kernel using it will say the session was closed.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Close TrainJob' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await closeJob(s.namespace, s.name);
    } catch (err) {
      await showErrorMessage('Could not close the TrainJob', String(err));
    }
  }
}

/** The session's open forwards, each opened by its button at the link the kernel shows for
 * it; or a line saying none is open. */
function forwardsList(s: ISession): HTMLElement {
  const list = document.createElement('div');
  list.className = 'tjm-sidebar-forwards';
  const forwards = s.forwards ?? [];
  if (!forwards.length) {
    list.appendChild(line('tjm-sidebar-no-forward', 'No port forward open'));
    return list;
  }
  for (const f of forwards) {
    const item = document.createElement('div');
    item.className = 'tjm-sidebar-forward';
    item.dataset.port = String(f.port);
    item.appendChild(line('tjm-sidebar-forward-words', forwardWords(f)));
    item.appendChild(
      button(`Open port ${f.port}`, 'tjm-forward', () => {
        window.open(f.link, '_blank', 'noopener');
      })
    );
    item.title = f.link;
    list.appendChild(item);
  }
  return list;
}

function line(className: string, text: string): HTMLElement {
  const div = document.createElement('div');
  div.className = className;
  div.textContent = text;
  return div;
}

function button(label: string, className: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.className = `jp-Button jp-mod-styled jp-mod-reject tjm-button ${className}`;
  b.textContent = label;
  b.addEventListener('click', onClick);
  return b;
}
