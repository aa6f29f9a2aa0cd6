/**
 * nbprec's JupyterLab (and Notebook 7) extension.
 *
 * - file browser context menu: "nbprec: inspect dump" on a dump, "nbprec: compare (target, benchmark)" on two;
 * - Launcher card and command palette entry "New precision investigation" (a dialog: target, benchmark, rule);
 * - dump folders get nbprec's folder icon (detected by the server extension, GET /nbprec/dumps);
 * - data grids (the dashboard's operator table, in JupyterLab and in Voila) copy each painted region to the
 *   screen once, not each cell: gridmime.ts, a module of its own, since Voila lacks this one's imports.
 *
 * The commands ask the server extension (nbprec/jupyter/server.py) to write a notebook from a template, open
 * it and run it once. Every token but the application is optional, so the plugin loads wherever a part of
 * JupyterLab is missing (Notebook 7 has no launcher) and does nothing where there is no file browser.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, showErrorMessage } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { FileBrowser, IDefaultFileBrowser, IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Contents } from '@jupyterlab/services';

import { createNotebook, serverInfo } from './api';
import { requestAutorun, watchNotebooks } from './autorun';
import { DumpDetector } from './detect';
import { askInvestigation } from './dialog';
import { dumpFolderIcon, investigationIcon } from './icons';
import { orderPair } from './roles';

namespace CommandIDs {
  export const inspect = 'nbprec:inspect-dump';
  export const compare = 'nbprec:compare-dumps';
  export const investigate = 'nbprec:new-investigation';
}

/** Rules offered when the server extension cannot be asked (the presets of nbprec.compare.rules). */
const FALLBACK_RULES = ['default', 'cann', 'msprobe', 'precision_tool', 'ptdbg'];

function activate(
  app: JupyterFrontEnd,
  factory: IFileBrowserFactory | null,
  defaultBrowser: IDefaultFileBrowser | null,
  launcher: ILauncher | null,
  palette: ICommandPalette | null,
  notebooks: INotebookTracker | null
): void {
  const detector = new DumpDetector(app.docRegistry);
  if (defaultBrowser) {
    detector.watch(defaultBrowser);
  }
  factory?.tracker.widgetAdded.connect((_, browser) => detector.watch(browser));
  factory?.tracker.forEach(browser => detector.watch(browser));
  if (notebooks) {
    watchNotebooks(notebooks);
  }

  const browser = (): FileBrowser | null => factory?.tracker.currentWidget ?? defaultBrowser ?? null;
  const selected = (): Contents.IModel[] => {
    const current = browser();
    return current ? Array.from(current.selectedItems()) : [];
  };
  /** Whether nbprec reads `item` (folders are offered when the server cannot say). */
  const isDump = (item: Contents.IModel): boolean => {
    const format = detector.formatOf(item.path);
    return format === null ? item.type === 'directory' : format !== '';
  };

  const open = async (target: string, bench: string, rule: string, directory: string): Promise<void> => {
    try {
      const path = await createNotebook({ directory, target, bench: bench || undefined, rule: rule || undefined });
      requestAutorun(path);
      await app.commands.execute('docmanager:open', { path, factory: 'Notebook' });
    } catch (error) {
      await showErrorMessage('nbprec', (error as Error).message || String(error));
    }
  };

  app.commands.addCommand(CommandIDs.inspect, {
    label: 'nbprec: inspect dump',
    caption: 'Open a notebook describing this dump: summary, overflow, headroom',
    icon: dumpFolderIcon,
    isVisible: () => {
      const items = selected();
      return items.length === 1 && isDump(items[0]);
    },
    execute: () => {
      const items = selected();
      if (items.length === 1) {
        return open(items[0].name, '', '', PathExt.dirname(items[0].path));
      }
    }
  });

  app.commands.addCommand(CommandIDs.compare, {
    label: 'nbprec: compare (target, benchmark)',
    caption: () => {
      const items = selected();
      if (items.length !== 2) {
        return 'Compare two dumps';
      }
      const [target, bench] = orderPair(items[0].name, items[1].name);
      return `Compare ${target} (target) with ${bench} (benchmark) in a new notebook`;
    },
    icon: investigationIcon,
    isVisible: () => {
      const items = selected();
      return items.length === 2 && items.every(isDump);
    },
    execute: () => {
      const items = selected();
      if (items.length === 2) {
        const [target, bench] = orderPair(items[0].name, items[1].name);
        return open(target, bench, '', PathExt.dirname(items[0].path));
      }
    }
  });

  app.commands.addCommand(CommandIDs.investigate, {
    label: 'New precision investigation',
    caption: 'Compare a target dump with a benchmark dump (or inspect one) in a new notebook',
    icon: args => (args.isPalette ? undefined : investigationIcon),
    execute: async () => {
      const current = browser();
      const folder = current?.model.path ?? '';
      const found = Object.keys(detector.dumpsIn(folder)).sort();
      const picked = selected().map(item => item.name);
      const [target, bench] = picked.length === 2 ? orderPair(picked[0], picked[1]) : [picked[0] ?? '', ''];
      let rules = FALLBACK_RULES;
      let rule = 'default';
      try {
        const info = await serverInfo();
        rules = info.rules;
        rule = info.default_rule;
      } catch {
        // no server extension: the dialog offers the preset names; creating the notebook reports the problem
      }
      const answer = await askInvestigation(folder, found, rules, { target, bench, rule });
      if (answer && answer.target) {
        await open(answer.target, answer.bench, answer.rule, folder);
      } else if (answer) {
        await showErrorMessage('nbprec', 'Give at least the target dump.');
      }
    }
  });

  app.contextMenu.addItem({ command: CommandIDs.inspect, selector: '.jp-DirListing-item[data-isdir]', rank: 3 });
  app.contextMenu.addItem({ command: CommandIDs.compare, selector: '.jp-DirListing-item[data-isdir]', rank: 3 });
  launcher?.add({ command: CommandIDs.investigate, category: 'Other', rank: 0 });
  palette?.addItem({ command: CommandIDs.investigate, category: 'nbprec' });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-nbprec:plugin',
  description: 'nbprec: inspect and compare precision dumps from the file browser',
  autoStart: true,
  optional: [IFileBrowserFactory, IDefaultFileBrowser, ILauncher, ICommandPalette, INotebookTracker],
  activate
};

export default plugin;
