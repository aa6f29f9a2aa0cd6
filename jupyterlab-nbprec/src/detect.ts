/**
 * Which entries of the folders the file browsers show are dumps nbprec reads, and the dump icon on them.
 *
 * The server decides (the rules of nbprec.guess_format, GET /nbprec/dumps). The icon comes from a document
 * registry file type with contentType "directory" whose name pattern lists the dump folders of the folders
 * on show (replaced whenever that list changes), so every listing drawn afterwards shows it. Rows drawn
 * before the answer came are redrawn here: the listing redraws a row only when its name, date or selection
 * changes, not when the registry does.
 */
import { PathExt } from '@jupyterlab/coreutils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { FileBrowser } from '@jupyterlab/filebrowser';
import { folderIcon } from '@jupyterlab/ui-components';
import { IDisposable } from '@lumino/disposable';

import { detectDumps, NbprecServerError } from './api';
import { dumpFolderIcon } from './icons';

/** The file type name of dump folders. */
export const DUMP_FILE_TYPE = 'nbprec-dump';

interface IFolderState {
  /** Entry names and modification times when probed: a change means probing again. */
  key: string;
  dumps: { [name: string]: string };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export class DumpDetector {
  constructor(registry: DocumentRegistry) {
    this._registry = registry;
  }

  /** false once the server said it has no nbprec extension; the commands then offer every folder. */
  get available(): boolean {
    return this._available;
  }

  /**
   * The format of the dump at `path` (a server path): a format name, '' when nbprec does not read it, or
   * null when not known (its folder was not probed, or the server extension is missing).
   */
  formatOf(path: string): string | null {
    const folder = this._folders.get(PathExt.dirname(path));
    if (!folder) {
      return null;
    }
    return folder.dumps[PathExt.basename(path)] ?? '';
  }

  /** The dumps of the folder `path` that were found, by name. */
  dumpsIn(path: string): { [name: string]: string } {
    return this._folders.get(path)?.dumps ?? {};
  }

  /** Follow a file browser: probe each folder it shows, again when its entries change. */
  watch(browser: FileBrowser): void {
    if (this._browsers.has(browser)) {
      return;
    }
    this._browsers.add(browser);
    const probe = () => void this._probe(browser);
    browser.model.refreshed.connect(probe);
    browser.model.pathChanged.connect(probe);
    browser.disposed.connect(() => {
      this._browsers.delete(browser);
      browser.model.refreshed.disconnect(probe);
      browser.model.pathChanged.disconnect(probe);
    });
    probe();
  }

  private async _probe(browser: FileBrowser): Promise<void> {
    if (!this._available || browser.isDisposed) {
      return;
    }
    const path = browser.model.path;
    const items = Array.from(browser.model.items());
    const key = items
      .map(item => `${item.name}\u0000${item.last_modified}`)
      .sort()
      .join('\u0001');
    const known = this._folders.get(path);
    if (known && known.key === key) {
      this._updateFileType();
      return;
    }
    try {
      const detected = await detectDumps(path);
      this._folders.set(path, { key: detected.complete ? key : '', dumps: detected.dumps });
      if (this._folders.size > 50) {
        this._folders.delete(this._folders.keys().next().value as string);
      }
    } catch (error) {
      if (error instanceof NbprecServerError && error.status === 404) {
        this._available = false;
        console.warn(`nbprec: ${error.message}; dump folders get no icon`);
      } else {
        console.warn('nbprec: dump detection failed', error);
      }
      return;
    }
    if (browser.model.path === path) {
      this._updateFileType();
    }
  }

  /** Register the file type matching the dump folders on show, and redraw the rows whose icon is wrong. */
  private _updateFileType(): void {
    const names = new Set<string>();
    for (const shown of this._browsers) {
      const dumps = this.dumpsIn(shown.model.path);
      const folders = new Set(
        Array.from(shown.model.items())
          .filter(item => item.type === 'directory')
          .map(item => item.name)
      );
      Object.keys(dumps)
        .filter(name => folders.has(name))
        .forEach(name => names.add(name));
    }
    const pattern = names.size
      ? `^(?:${Array.from(names).sort().map(escapeRegExp).join('|')})$`
      : '';
    if (pattern !== this._pattern) {
      this._pattern = pattern;
      this._fileType?.dispose();
      this._fileType = null;
      if (pattern) {
        this._fileType = this._registry.addFileType({
          name: DUMP_FILE_TYPE,
          displayName: 'nbprec dump',
          contentType: 'directory',
          extensions: [],
          mimeTypes: ['text/directory'],
          pattern,
          icon: dumpFolderIcon
        });
      }
    }
    // after the listing's own icon updates, which it makes in an animation frame
    requestAnimationFrame(() => this._browsers.forEach(shown => Private.redrawIcons(shown, names)));
  }

  private _registry: DocumentRegistry;
  private _browsers = new Set<FileBrowser>();
  private _folders = new Map<string, IFolderState>();
  private _fileType: IDisposable | null = null;
  private _pattern = '';
  private _available = true;
}

namespace Private {
  /** Give the folder rows of `browser` named in `dumps` the dump icon, and the others back the folder icon. */
  export function redrawIcons(browser: FileBrowser, dumps: Set<string>): void {
    const folders = new Set(
      Array.from(browser.model.items())
        .filter(item => item.type === 'directory')
        .map(item => item.name)
    );
    browser.node.querySelectorAll('.jp-DirListing-item').forEach(row => {
      const name = row.querySelector('.jp-DirListing-itemText')?.textContent ?? '';
      const container = row.querySelector<HTMLElement>('.jp-DirListing-itemIcon');
      if (!container || !folders.has(name)) {
        return;
      }
      const shown = container.querySelector('[data-icon]')?.getAttribute('data-icon');
      const wanted = dumps.has(name) ? dumpFolderIcon : folderIcon;
      if (shown !== wanted.name) {
        wanted.element({ container, className: 'jp-DirListing-itemIcon', stylesheet: 'listing' });
      }
    });
  }
}
