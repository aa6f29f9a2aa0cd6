/**
 * The extension's second module (package.json: jupyterlab.mimeExtension): patches Lumino's DataGrid so that
 * data grids copy each painted region to the screen once (gridcopies.ts).
 *
 * Why a MIME extension: Voila, which serves the dashboard (`nbprec serve`), loads every extension's modules but
 * provides none of the file browser, launcher and notebook packages the main module (index.ts) imports, so that
 * module fails to load there. A MIME extension module is loaded by JupyterLab and by Voila alike, and this one
 * imports nothing either lacks. The patch is applied when the module loads, before any grid is drawn; the
 * renderer it registers, for a MIME type nothing produces, is never used.
 */
import { Widget } from '@lumino/widgets';

/** The MIME type of the (unused) renderer: a MIME extension must register one. */
export const MIME_TYPE = 'application/vnd.nbprec.grid-copies';

/** The DataGrid of the page: a shared module (JupyterLab and Voila provide it, as ipydatagrid expects). */
export const patched: Promise<boolean> = Promise.all([import('@lumino/datagrid'), import('./gridcopies')])
  .then(([{ DataGrid }, { coalesceCellCopies }]) => {
    const done = coalesceCellCopies(DataGrid.prototype);
    if (!done) {
      console.warn('nbprec: this DataGrid build has no _drawCells/_blitContent; its cell copies are left as they are');
    }
    return done;
  })
  .catch(error => {
    console.warn('nbprec: no shared @lumino/datagrid on this page; data grids are left as they are', error);
    return false;
  });

class NothingToRender extends Widget {
  async renderModel(): Promise<void> {
    // nothing produces this MIME type
  }
}

const extension = {
  id: 'jupyterlab-nbprec:grid-copies',
  name: 'nbprec grid copies',
  rendererFactory: {
    safe: true,
    mimeTypes: [MIME_TYPE],
    createRenderer: (): NothingToRender => new NothingToRender()
  },
  rank: 1000,
  dataType: 'string' as const
};

export default extension;
