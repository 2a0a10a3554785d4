/** The MIME renderer of our panels: live state from the server extension, then the HTML the
 * kernel last drew (sanitised unless trusted), dimmed once it is out of date. */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { forwardClosed, renderForwardEnded } from './forward';
import { renderGpus, sharedGpuReports, wantsGpus } from './gpus';
import { sharedModel } from './model';
import { isStale, renderLive, showsHolds } from './panel';
import { IPanelRef, PANEL_MIME } from './types';

export class PanelRenderer extends Widget implements IRenderMime.IRenderer {
  private _ref: IPanelRef | null = null;
  private _live: HTMLDivElement;
  private _static: HTMLDivElement;
  private _gpus: HTMLDivElement;
  private _inView = true; // on screen (IntersectionObserver, where the browser has it)
  private _observer: IntersectionObserver | null = null;
  private _sanitizer: IRenderMime.ISanitizer;
  private _ended = false; // the static part shows the forward's ended form

  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._sanitizer = options.sanitizer;
    this.addClass('tjm-panel');
    this._live = document.createElement('div');
    this._live.className = 'tjm-live-state';
    this._gpus = document.createElement('div');
    this._gpus.className = 'tjm-gpus';
    this._gpus.hidden = true;
    this._static = document.createElement('div');
    this._static.className = 'tjm-kernel-drawing'; // not the kernel's own tjm-static
    this.node.appendChild(this._live);
    this.node.appendChild(this._gpus);
    this.node.appendChild(this._static);
    sharedModel().changed.connect(this._update, this);
    sharedGpuReports().changed.connect(this._update, this);
    if (typeof IntersectionObserver !== 'undefined') {
      this._observer = new IntersectionObserver(entries => {
        this._inView = entries.some(e => e.isIntersecting);
        this._update();
      });
      this._observer.observe(this.node);
    }
    document.addEventListener('visibilitychange', this._onPageVisibility);
  }

  private _onPageVisibility = (): void => this._update();

  protected onAfterShow(): void {
    this._update(); // a tab brought back: its GPUs are asked for again
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._ref = model.data[PANEL_MIME] as unknown as IPanelRef;
    this._ended = false;
    const html = model.data['text/html'];
    const text = model.data['text/plain'];
    if (typeof html === 'string') {
      this._static.innerHTML = model.trusted ? html : this._sanitizer.sanitize(html);
    } else {
      this._static.textContent = typeof text === 'string' ? text : '';
    }
    this._update();
    return Promise.resolve();
  }

  private _update(): void {
    const ref = this._ref;
    if (!ref) {
      return;
    }
    const job = sharedModel().find(ref.namespace, ref.name, ref.uid ?? '');
    renderLive(this._live, ref, job);
    // GPUs: asked only while this panel is on screen, in a page that is shown
    const visible = this._inView && this.isVisible && document.visibilityState !== 'hidden';
    const gpus = sharedGpuReports();
    if (wantsGpus(ref.kind, job, visible)) {
      gpus.ask(ref.namespace, ref.name, ref.uid ?? '');
    }
    const running = wantsGpus(ref.kind, job, true);
    renderGpus(this._gpus, running ? gpus.latest(ref.namespace, ref.name, ref.uid ?? '') : null);
    const closed = forwardClosed(ref, job);
    if (closed && !this._ended) {
      this._ended = true;
      renderForwardEnded(this._static, ref, closed);
    }
    this._static.classList.toggle('tjm-stale', !this._ended && isStale(job, ref));
    this._static.classList.toggle('tjm-live-holds', showsHolds(ref, job));
  }

  dispose(): void {
    sharedModel().changed.disconnect(this._update, this);
    sharedGpuReports().changed.disconnect(this._update, this);
    this._observer?.disconnect();
    document.removeEventListener('visibilitychange', this._onPageVisibility);
    super.dispose();
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [PANEL_MIME],
  createRenderer: options => new PanelRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'trainjob-magics-labextension:panels',
  rendererFactory,
  rank: 10,
  dataType: 'json'
};

export default extension;
