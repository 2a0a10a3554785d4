/** The plugins: the sessions sidebar and the status-bar item (JupyterLab 4 and Notebook 7). */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { sharedModel } from './model';
import { SessionsSidebar } from './sidebar';
import { SessionsStatus } from './statusbar';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
  '<rect x="3" y="4" width="18" height="4" rx="1"/><rect x="3" y="10" width="18" height="4" rx="1"/>' +
  '<rect x="3" y="16" width="18" height="4" rx="1"/></g></svg>';

const icon = new LabIcon({ name: 'trainjob-magics:sessions', svgstr: ICON_SVG });

const TOGGLE = 'trainjob-magics:toggle-sessions';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'trainjob-magics-labextension:plugin',
  description: 'TrainJob sessions: a sidebar and a status-bar item',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null): void => {
    const model = sharedModel();
    const sidebar = new SessionsSidebar(model);
    sidebar.title.icon = icon;
    app.shell.add(sidebar, 'left', { rank: 900 });
    app.commands.addCommand(TOGGLE, {
      label: 'TrainJob sessions',
      execute: () => app.shell.activateById(sidebar.id)
    });
    if (statusBar) {
      const item = new SessionsStatus(model, () => void app.commands.execute(TOGGLE));
      statusBar.registerStatusItem('trainjob-magics-labextension:status', {
        item,
        align: 'left',
        rank: 900
      });
    }
  }
};

export default plugin;
