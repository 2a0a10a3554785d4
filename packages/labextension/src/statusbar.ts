/** The status-bar item: how many sessions and what they hold in total. */
import { Widget } from '@lumino/widgets';

import { totals, totalsLine } from './format';
import { SessionsModel } from './model';

export class SessionsStatus extends Widget {
  private _model: SessionsModel;

  constructor(model: SessionsModel, onClick: () => void) {
    super();
    this._model = model;
    this.addClass('tjm-statusbar-item');
    this.node.title = 'TrainJob sessions (click for the sidebar)';
    this.node.addEventListener('click', onClick);
    model.changed.connect(this._render, this);
    this._render();
  }

  private _render(): void {
    const sessions = this._model.sessions;
    this.node.textContent = totalsLine(totals(sessions));
  }
}
